package ostest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// guestTool builds a test-only command of this module for the guest
// (static, stripped) and returns the binary's bytes, for Machine.AddFile.
func guestTool(t *testing.T, pkg string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s for the guest: %v\n%s", pkg, err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

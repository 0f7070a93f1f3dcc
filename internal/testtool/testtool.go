// Package testtool is for tests that need a program or a facility of the
// machine: a plain `go test` skips the test when one is missing, with what
// to install; under make test (which ran scripts/deps.sh and sets
// VOLUMED_DEPS) or CI it fails, because deps.sh installs everything the
// tests need and a skipped test proves nothing.
package testtool

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Missing reports that what (a program, a facility) is not on this
// machine: it fails the test under CI and skips it elsewhere.
func Missing(t testing.TB, what, install string, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is missing, though scripts/deps.sh ran (%s): %v", what, install, err)
	}
	t.Skipf("%s is missing on this machine (%s; sudo make deps installs it): %v", what, install, err)
}

// Required reports whether a missing tool fails the test: under make test
// (after scripts/deps.sh) and CI.
func Required() bool {
	return os.Getenv("VOLUMED_DEPS") != "" || os.Getenv("CI") != ""
}

// Need returns the path of each program, or reports the first missing
// one with Missing; install says where it comes from (a Debian package).
// A program not in the registry (Tools) fails the test on any machine:
// the fresh-machine test would not know to check it.
func Need(t testing.TB, install string, programs ...string) []string {
	t.Helper()
	paths := make([]string, 0, len(programs))
	for _, p := range programs {
		if _, ok := Lookup(p); !ok {
			t.Fatalf("testtool.Need(%q): not in internal/testtool's registry (tools.go); add it with its Debian package", p)
		}
		path, err := exec.LookPath(p)
		if err != nil {
			Missing(t, p, install, err)
		}
		paths = append(paths, path)
	}
	return paths
}

// Losetup attaches img to a free loop device with losetup and more
// options (a test's stand-in for a disk: "-P" has the kernel make its
// partitions, "-b", "4096" gives it 4 KiB sectors) and detaches it when
// the test ends, failed or not.
func Losetup(t testing.TB, img string, options ...string) string {
	t.Helper()
	args := append(append([]string{"-f", "--show"}, options...), img)
	out, err := exec.Command("losetup", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// ModuleRoot is the directory of the go.mod above the test's directory:
// the repository, whose .cache/ the tests that build images keep them in.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	t.Fatalf("no go.mod above %s", dir)
	return ""
}

// Image makes a sparse file of size bytes in a temporary directory of
// the test, to format or to back a loop device.
func Image(t testing.TB, size int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	return img
}

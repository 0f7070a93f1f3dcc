package blockfs

// What the tests share: images under a temp dir, the tools they run
// and the bytes they write.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

func TestMain(m *testing.M) { testns.Main(m) }

const mib = 1 << 20

// image creates a sparse file of size bytes.
func image(t *testing.T, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		testtool.Need(t, "e2fsprogs, xfsprogs, btrfs-progs, dosfstools, fdisk, gdisk, util-linux", tool)
	}
}

func have(tool string) bool { _, err := exec.LookPath(tool); return err == nil }

func runCmd(t *testing.T, stdin string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

package loop

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The room check counts what the image may still take: the whole size
// for a new image, the part not yet written for an existing one.
func TestCheckRoom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })

	err := CheckRoom(filepath.Join(dir, "sub", "new.img"), 8*mib)
	if !errors.Is(err, ErrNoRoom) || !strings.Contains(err.Error(), "8.0 MiB") || !strings.Contains(err.Error(), "4.0 MiB free") {
		t.Errorf("CheckRoom(8 MiB on a 4 MiB filesystem) = %v, want ErrNoRoom naming both sizes", err)
	}
	if err := CheckRoom(filepath.Join(dir, "new.img"), 2*mib); err != nil {
		t.Errorf("CheckRoom(2 MiB) = %v", err)
	}
	// 3 MiB written of a 6 MiB image: 3 MiB more may come, 1 MiB is free.
	img := filepath.Join(dir, "half.img")
	if err := os.WriteFile(img, make([]byte, 3*mib), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 6*mib); err != nil {
		t.Fatal(err)
	}
	if err := CheckRoom(img, 6*mib); !errors.Is(err, ErrNoRoom) {
		t.Errorf("CheckRoom(6 MiB, 3 written, 1 free) = %v, want ErrNoRoom", err)
	}
	if err := CheckRoom(img, 4*mib); err != nil {
		t.Errorf("CheckRoom(4 MiB, 3 written, 1 free) = %v", err)
	}
}

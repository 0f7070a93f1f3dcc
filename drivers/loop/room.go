package loop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNoRoom is wrapped by CheckRoom when the filesystem holding an image
// has less free space than the image could still take.
var ErrNoRoom = errors.New("not enough free space for the image")

// CheckRoom checks that the filesystem holding file (which may not exist
// yet) has room for the image to reach size bytes: a sparse image takes
// its blocks as they are written, and one that finds no room then fails
// writes inside the filesystem it carries, which corrupts it. Blocks the
// image already holds count as taken.
func CheckRoom(file string, size int64) error {
	var held int64
	st, err := os.Lstat(file)
	switch {
	case err == nil:
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			held = sys.Blocks * 512
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("check room for %s: %w", file, err)
	}
	dir, err := existingDir(filepath.Dir(file))
	if err != nil {
		return fmt.Errorf("check room for %s: %w", file, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("check room for %s: statfs %s: %w", file, dir, err)
	}
	free := int64(fs.Bavail) * fs.Bsize
	if need := size - held; need > free {
		return fmt.Errorf("%w: %s of %s may still be written but the filesystem holding it (%s) has %s free",
			ErrNoRoom, Bytes(need), file, dir, Bytes(free))
	}
	return nil
}

// existingDir is dir or its nearest existing ancestor: where the image's
// directories will be made.
func existingDir(dir string) (string, error) {
	for {
		_, err := os.Stat(dir)
		if err == nil || !errors.Is(err, os.ErrNotExist) || dir == filepath.Dir(dir) {
			return dir, err
		}
		dir = filepath.Dir(dir)
	}
}

// Bytes writes a size the way manifests do (MiB, GiB), for messages.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

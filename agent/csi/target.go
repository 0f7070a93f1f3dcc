package csi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/safepath"
)

// absent reports whether nothing is at p yet: a target NodePublish finds
// absent is one volumed makes, and so one NodeUnpublish may remove.
func absent(p string) bool {
	_, err := os.Lstat(p)
	return errors.Is(err, os.ErrNotExist)
}

// removeMadeTarget removes what volumed made at tp for a publish, once
// nothing is mounted there, as the CSI spec asks of what a plugin
// created: an empty directory, or for a raw block volume (block) the
// empty file its device node was bound on. Anything else (a file that
// holds bytes, a directory that holds entries, a symlink, a path reached
// through one) is left as it is: it is not what volumed made.
func removeMadeTarget(tp string, block bool) error {
	dir, err := safepath.OpenDir(filepath.Dir(tp), false)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, safepath.ErrSymlink) {
		return nil
	}
	if err != nil {
		return err
	}
	defer dir.Close()
	base := filepath.Base(tp)
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("target %s: %w", tp, err)
	}
	// rmdir removes nothing but an empty directory, and neither rmdir nor
	// unlink removes a mount point (EBUSY).
	switch mode := st.Mode & unix.S_IFMT; {
	case mode == unix.S_IFDIR:
		err = unix.Unlinkat(int(dir.Fd()), base, unix.AT_REMOVEDIR)
	case block && mode == unix.S_IFREG && st.Size == 0:
		err = unix.Unlinkat(int(dir.Fd()), base, 0)
	default:
		return nil
	}
	if err == nil || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("remove target %s: %w", tp, err)
}

package csi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/durable"
)

// snapshotsSub is the pool's subdirectory of snapshot files.
const snapshotsSub = ".snapshots"

// reflinks says whether the pool's filesystem shares extents between
// files (FICLONE: xfs with reflink, btrfs): the snapshots are served
// only then, each a copy that costs nothing until either side changes.
func (p loopPool) reflinks() bool {
	dir := p.dir
	a, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return false
	}
	defer os.Remove(a.Name())
	defer a.Close()
	b, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return false
	}
	defer os.Remove(b.Name())
	defer b.Close()
	return unix.IoctlFileClone(int(b.Fd()), int(a.Fd())) == nil
}

// snapshotFile is where a snapshot's copy lives.
func (p loopPool) snapshotFile(key string) string {
	return filepath.Join(p.dir, snapshotsSub, key+".img")
}

// cloneFile makes dst a reflinked copy of src of size bytes (src missing:
// an image never staged, all zeros: a sparse file), whole or not at all:
// made under a temporary name, synced, renamed, the directory synced.
// An existing dst is kept (a call retried after a crash).
func cloneFile(src, dst string, size int64) error {
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("copy of %s: %w", src, err)
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("copy of %s: %w", src, err)
	}
	err = func() error {
		in, err := os.Open(src)
		if errors.Is(err, fs.ErrNotExist) {
			return out.Truncate(size)
		}
		if err != nil {
			return err
		}
		defer in.Close()
		if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
			return fmt.Errorf("reflink: %w", err)
		}
		if st, err := out.Stat(); err == nil && st.Size() < size {
			return out.Truncate(size)
		}
		return nil
	}()
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return durable.SyncDir(filepath.Dir(dst))
}

// flush writes what the filesystem mounted at staging holds in memory
// down to its device, so that a copy of the image taken next holds it:
// the copy is then as a clean power cut at that instant leaves it.
func flush(staging string) error {
	f, err := os.Open(staging)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// Package durable writes files so that a crash or power cut leaves the old
// content or the new, never a mix, and a rename that is on disk.
package durable

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SyncDir makes the directory's entries (a rename, a create, a remove)
// durable.
func SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

// WriteFile replaces path with data: written to a new file of mode perm
// beside it (never following a link, never reusing an existing file),
// synced, renamed over path, and the directory synced. A failure removes
// the temporary file; a crash may leave one, named ".volumed-<hex>", which
// readers of the directory must pass over.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return WriteFileVia(filepath.Dir(path), path, data, perm)
}

// WriteFileVia is WriteFile with the temporary file in tmpDir, which must
// be on path's filesystem: for a directory whose readers would take any
// new name in it as theirs (open-iscsi reads every file of a portal's
// directory as an interface's record). Both directories are synced.
func WriteFileVia(tmpDir, path string, data []byte, perm os.FileMode) error {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	tmp := filepath.Join(tmpDir, ".volumed-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if dir := filepath.Dir(path); filepath.Clean(tmpDir) != dir {
		if err := SyncDir(tmpDir); err != nil {
			return err
		}
	}
	return SyncDir(filepath.Dir(path))
}

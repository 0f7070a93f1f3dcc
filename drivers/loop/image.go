package loop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/durable"
	"github.com/volumed/volumed/internal/safepath"
	"github.com/volumed/volumed/internal/sysfs"
)

// EnsureImage creates a sparse image file of size bytes (mode 0600,
// parent directories 0755) if file does not exist, and reports whether
// it did. An existing file is never truncated, grown or shrunk; it is an
// error if it is not a regular file (a symlink included).
//
// The file appears under its name only at its full size (it is sized as
// an unnamed O_TMPFILE and then linked), so a crash never leaves a short
// image behind that a later call would accept.
func EnsureImage(file string, size int64) (created bool, err error) {
	created, err = ensureImage(file, size)
	if err != nil {
		return false, fmt.Errorf("ensure image %s: %w", file, err)
	}
	return created, nil
}

func ensureImage(file string, size int64) (bool, error) {
	if size <= 0 {
		return false, fmt.Errorf("size %d is not positive", size)
	}
	if exists, err := existingImage(file); exists || err != nil {
		return false, err
	}
	dir := filepath.Dir(file)
	if err := mkdirAll(dir); err != nil {
		return false, err
	}
	// The image is made and named through a handle of its directory
	// opened with no symlink followed: a path swapped for a link after
	// the checks cannot put the image elsewhere.
	d, err := safepath.OpenDir(dir, false)
	if err != nil {
		return false, err
	}
	defer d.Close()
	dirFd, base := int(d.Fd()), filepath.Base(file)
	err = createTmpfile(dirFd, dir, base, size)
	if errors.Is(err, errNoTmpfile) {
		err = createNamed(dirFd, dir, base, size)
	}
	if errors.Is(err, os.ErrExist) {
		// Created by someone else meanwhile: theirs stands.
		_, err := existingImage(file)
		return false, err
	}
	if err != nil {
		return false, err
	}
	return true, syncDirAt(dirFd, dir)
}

// existingImage reports whether file exists, failing if it is not a
// regular file.
func existingImage(file string) (bool, error) {
	st, err := os.Lstat(file)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !st.Mode().IsRegular() {
		return true, fmt.Errorf("exists and is not a regular file (%s)", st.Mode().Type())
	}
	return true, nil
}

var errNoTmpfile = errors.New("O_TMPFILE not supported")

func createTmpfile(dirFd int, dir, base string, size int64) error {
	fd, err := unix.Openat(dirFd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) {
		return errNoTmpfile
	}
	if err != nil {
		return fmt.Errorf("open O_TMPFILE in %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := sizeAndSync(fd, size); err != nil {
		return err
	}
	// linkat never replaces an existing name (EEXIST).
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirFd, base, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.ENOENT) { // no /proc: needs CAP_DAC_READ_SEARCH instead
		err = unix.Linkat(fd, "", dirFd, base, unix.AT_EMPTY_PATH)
	}
	if err != nil {
		return &os.LinkError{Op: "link", Old: "O_TMPFILE", New: filepath.Join(dir, base), Err: err}
	}
	return nil
}

func createNamed(dirFd int, dir, base string, size int64) (err error) {
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	tmp := "." + base + ".tmp-" + hex.EncodeToString(r[:])
	fd, err := unix.Openat(dirFd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: filepath.Join(dir, tmp), Err: err}
	}
	// The temporary name goes, linked or not: left behind, it would keep
	// the image's blocks after the image is deleted.
	defer func() {
		if uerr := unix.Unlinkat(dirFd, tmp, 0); uerr != nil && err == nil {
			err = &os.PathError{Op: "remove", Path: filepath.Join(dir, tmp), Err: uerr}
		}
	}()
	err = sizeAndSync(fd, size)
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Linkat(dirFd, tmp, dirFd, base, 0); err != nil { // never replaces an existing name
		return &os.LinkError{Op: "link", Old: tmp, New: filepath.Join(dir, base), Err: err}
	}
	return nil
}

func sizeAndSync(fd int, size int64) error {
	if err := unix.Ftruncate(fd, size); err != nil {
		return fmt.Errorf("truncate to %d: %w", size, err)
	}
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return nil
}

// mkdirAll creates dir and missing parents (0755) and makes each new
// entry durable by syncing the directory that holds it.
func mkdirAll(dir string) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s: not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return durable.SyncDir(parent)
}

// syncDirAt makes the entries of the directory open as dirFd (an O_PATH
// handle will do) durable.
func syncDirAt(dirFd int, dir string) error {
	fd, err := unix.Openat(dirFd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

// Grow extends dev's backing file to size bytes if it is smaller (it
// never shrinks it) and has the loop device pick up the file's size
// (LOOP_SET_CAPACITY). The device and the file at its path are both
// checked to be dev's backing file first. It returns the block device's
// new size.
func Grow(ctx context.Context, dev Device, size int64) (int64, error) {
	n, err := grow(ctx, dev, size)
	if err != nil {
		return 0, fmt.Errorf("grow %s: %w", devPath(dev.Number), err)
	}
	return n, nil
}

func grow(ctx context.Context, dev Device, size int64) (int64, error) {
	if size <= 0 {
		return 0, fmt.Errorf("size %d is not positive", size)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cur, err := Get(dev.Number)
	if err != nil {
		return 0, err
	}
	if cur == nil {
		return 0, errors.New("not bound")
	}
	if !cur.sameFile(dev) {
		return 0, identityErr(cur.Identity(), dev)
	}
	if cur.Deleted {
		return 0, fmt.Errorf("backing file %s was deleted", cur.BackingFile)
	}

	file, err := openImage(cur.BackingFile, false)
	if err != nil {
		return 0, err
	}
	defer unix.Close(file)
	var st unix.Stat_t
	if err := unix.Fstat(file, &st); err != nil {
		return 0, err
	}
	if st.Dev != dev.BackingDev || st.Ino != dev.BackingIno {
		return 0, fmt.Errorf("%w: %s is now another file (%d:%d)", ErrIdentity, cur.BackingFile, st.Dev, st.Ino)
	}
	if st.Size < size {
		if err := sizeAndSync(file, size); err != nil {
			return 0, err
		}
	}

	fd, err := unix.Open(devPath(dev.Number), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: devPath(dev.Number), Err: err}
	}
	defer unix.Close(fd)
	now, err := readDevice(dev.Number, fd)
	if err != nil {
		return 0, err
	}
	if now == nil || !now.sameFile(dev) {
		return 0, fmt.Errorf("%w: rebound while growing", ErrIdentity)
	}
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0); err != nil {
		return 0, fmt.Errorf("LOOP_SET_CAPACITY: %w", err)
	}
	return sysfs.Size(sysPath(dev.Number))
}

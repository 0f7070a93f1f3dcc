// Package mount mounts, bind-mounts and unmounts, and confirms every
// unmount against /proc/self/mountinfo, because an unmount that is
// believed done but is not (EBUSY, a stacked mount underneath) is how
// data ends up written to the wrong place.
//
// Mounts are made only onto directories opened without following
// symlinks, with the new mount API (at.go): a path swapped for a link
// between a check and the mount cannot redirect it.
package mount

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/safepath"
)

// ErrBusy is wrapped by Unmount when the target stayed busy.
var ErrBusy = errors.New("target is busy")

// Unmount unmounts the topmost mount at target (a path as mountinfo
// shows it: absolute, without symlinks) and confirms with the kernel that
// this very mount (by mount ID, through statx, or mountinfo on kernels
// before 5.8) is gone; a mount stacked underneath stays. While the target
// is busy it retries with backoff until ctx is done and then returns an
// error wrapping ErrBusy. Nothing mounted at target is success.
//
// Mount IDs can be reused once freed; a new mount at the same target with
// the recycled ID in the instant between the unmount and the check would
// be taken for the old one. Nothing in this agent mounts there
// concurrently (one operation per volume), so that window is accepted.
func Unmount(ctx context.Context, target string) error {
	target = filepath.Clean(target)
	id, mounted, err := topID(target)
	if err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	if !mounted {
		return nil
	}
	backoff := 10 * time.Millisecond
	for {
		// NOFOLLOW: unmount the path that was looked up, not wherever a
		// symlink there points now.
		err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			// EINVAL/ENOENT: not a mount point (anymore); someone else may
			// have unmounted it. The kernel decides.
			return confirmGone(target, id, err)
		case errors.Is(err, unix.EBUSY):
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("unmount %s: %w (gave up: %v)", target, ErrBusy, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// topID is the ID of the topmost mount exactly at target, if any.
func topID(target string) (int, bool, error) {
	p, err := At(target)
	switch {
	case err == nil:
		return p.MountID, p.Root, nil
	case errors.Is(err, unix.ENOENT):
		return 0, false, nil
	case !errors.Is(err, ErrNoMountID):
		return 0, false, err
	}
	top, err := Lookup(target)
	if err != nil || top == nil {
		return 0, false, err
	}
	return top.ID, true, nil
}

func confirmGone(target string, id int, umountErr error) error {
	now, mounted, err := topID(target)
	if err != nil {
		return fmt.Errorf("unmount %s: confirm: %w", target, err)
	}
	if mounted && now == id {
		if umountErr != nil {
			return fmt.Errorf("unmount %s: %w, and mount %d is still there", target, umountErr, id)
		}
		return fmt.Errorf("unmount %s: mount %d is still there after umount2 succeeded", target, id)
	}
	return nil
}

// EnsureDir creates a mount target directory (an absolute path) and any
// missing parents with mode 0755 (regardless of umask). It refuses a path
// with a symlink in any component or a component that is not a
// directory: a mount target must not be redirected (see safepath.OpenDir;
// SafeMountDevice and SafeBind create their targets themselves).
func EnsureDir(p string) error {
	f, err := safepath.OpenDir(p, true)
	if err != nil {
		return fmt.Errorf("ensure dir: %w", err)
	}
	return f.Close()
}

package loop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/inuse"
)

// Detach unbinds want's loop device after checking that it still backs
// the same file (BackingDev, BackingIno): a remembered device number
// alone is never trusted. It returns nil if the device is already
// unbound, an error wrapping ErrIdentity if it backs another file, and
// one wrapping ErrBusy if it is mounted or held by another block device.
// A transient exclusive claim (mkfs, fsck) is waited out until ctx ends.
func Detach(ctx context.Context, want Device) error {
	if err := detach(ctx, want); err != nil {
		return fmt.Errorf("detach %s: %w", devPath(want.Number), err)
	}
	return nil
}

func detach(ctx context.Context, want Device) error {
	if want.Number < 0 {
		return fmt.Errorf("loop device number %d out of range", want.Number)
	}
	backoff := 10 * time.Millisecond
	for {
		retry, err := detachOnce(ctx, want)
		if !retry {
			return err
		}
		if serr := sleep(ctx, backoff); serr != nil {
			return fmt.Errorf("%w (gave up: %v)", err, serr)
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// detachOnce makes one attempt; retry says whether the failure may pass.
func detachOnce(ctx context.Context, want Device) (retry bool, err error) {
	n := want.Number
	cur, err := Get(n)
	if err != nil || cur == nil {
		return false, err
	}
	if !cur.sameFile(want) {
		return false, identityErr(cur.Identity(), want)
	}
	// The one in-use rule (internal/inuse): holders of the device and
	// its partitions, then an exclusive open, which fails while the
	// device is mounted anywhere (any mount namespace) or claimed, and
	// keeps it from being mounted or re-configured by others until we
	// are done; the mount table is read only when that open is refused,
	// to tell a mount (which does not pass) from a transient claim.
	f, u, err := inuse.ClaimAt(sysPath(n), devPath(n))
	switch busy, why := inuse.Busy(u); {
	case err != nil:
		return false, err
	case u.Gone:
		return false, waitUnbound(ctx, n) // someone else is tearing it down
	case busy && u.Claimed && len(u.Mounts) == 0:
		return true, fmt.Errorf("%w: claimed exclusively by another user", ErrBusy)
	case busy:
		return false, fmt.Errorf("%w: %s", ErrBusy, why)
	}
	fd := int(f.Fd())
	open := true
	defer func() {
		if open {
			f.Close()
		}
	}()

	// Re-check under the claim: the device may have been re-bound since Get.
	info, err := unix.IoctlLoopGetStatus64(fd)
	if errors.Is(err, unix.ENXIO) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("LOOP_GET_STATUS64: %w", err)
	}
	if info.Device != want.BackingDev || info.Inode != want.BackingIno {
		return false, identityErr(fmt.Sprintf("%d:%d", info.Device, info.Inode), want)
	}

	// Since Linux 5.x LOOP_CLR_FD only arms autoclear and the detach
	// happens on the last close, which is ours unless someone else holds
	// the node open. Older kernels return EBUSY in that case instead.
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil {
		switch {
		case errors.Is(err, unix.ENXIO):
			return false, nil
		case errors.Is(err, unix.EBUSY):
			return true, fmt.Errorf("%w: LOOP_CLR_FD: %v", ErrBusy, err)
		}
		return false, fmt.Errorf("LOOP_CLR_FD: %w", err)
	}
	f.Close()
	open = false

	werr := waitUnbound(ctx, n)
	if werr == nil {
		return false, nil
	}
	// Another process still has the node open. Disarm the autoclear
	// LOOP_CLR_FD set, so that the device does not vanish later under
	// whoever uses it while we report it as still attached.
	msg := fmt.Sprintf("still open by another process after LOOP_CLR_FD (%v)", werr)
	if info.Flags&unix.LO_FLAGS_AUTOCLEAR == 0 {
		if err := disarmAutoclear(want); err != nil {
			msg += "; autoclear left armed: " + err.Error()
		}
	}
	return false, fmt.Errorf("%w: %s", ErrBusy, msg)
}

func identityErr(now string, want Device) error {
	return fmt.Errorf("%w: it is now %s, expected %s", ErrIdentity, now, want.Identity())
}

// waitUnbound waits until sysfs shows loop device n unbound, at most
// settleTimeout or until ctx ends.
func waitUnbound(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	backoff := time.Millisecond
	for {
		_, err := os.Stat(sysPath(n, "loop"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := sleep(ctx, backoff); err != nil {
			return fmt.Errorf("%s still bound: %w", devPath(n), err)
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

func disarmAutoclear(want Device) error {
	fd, err := unix.Open(devPath(want.Number), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENXIO) {
		return nil // its last user closed it meanwhile: it is gone
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	info, err := unix.IoctlLoopGetStatus64(fd)
	if errors.Is(err, unix.ENXIO) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Device != want.BackingDev || info.Inode != want.BackingIno || info.Flags&unix.LO_FLAGS_AUTOCLEAR == 0 {
		return nil
	}
	info.Flags &^= unix.LO_FLAGS_AUTOCLEAR
	return unix.IoctlLoopSetStatus64(fd, info)
}

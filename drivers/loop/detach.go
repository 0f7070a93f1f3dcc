package loop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
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
	devs, err := checkUnheld(n)
	if err != nil {
		return false, err
	}

	// O_EXCL fails while the device is mounted anywhere (any mount
	// namespace) or claimed by a holder, and keeps it from being mounted
	// or re-configured by others until we are done. Only then is the
	// mount table read, to tell a mount (which does not pass) from a
	// transient claim: a read of every mount on the host per detach
	// would make tearing down n volumes cost n².
	fd, err := unix.Open(devPath(n), unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.EBUSY):
		if err := checkUnmounted(devs); err != nil {
			return false, err
		}
		return true, fmt.Errorf("%w: claimed exclusively by another user", ErrBusy)
	case errors.Is(err, unix.ENXIO):
		return false, waitUnbound(ctx, n) // someone else is tearing it down
	case err != nil:
		return false, &os.PathError{Op: "open", Path: devPath(n), Err: err}
	}
	open := true
	defer func() {
		if open {
			unix.Close(fd)
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
	unix.Close(fd)
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

type majmin struct{ major, minor int }

// checkUnheld refuses a device (or one of its partitions) that has
// holders such as device-mapper, and returns the device numbers of the
// device and its partitions.
func checkUnheld(n int) (map[majmin]string, error) {
	nodes := []string{sysPath(n)}
	parts, _ := os.ReadDir(sysPath(n))
	for _, p := range parts {
		if strings.HasPrefix(p.Name(), fmt.Sprintf("loop%dp", n)) {
			nodes = append(nodes, sysPath(n, p.Name()))
		}
	}
	devs := map[majmin]string{}
	for _, node := range nodes {
		holders, err := os.ReadDir(node + "/holders")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if len(holders) > 0 {
			return nil, fmt.Errorf("%w: held by %s", ErrBusy, holders[0].Name())
		}
		b, err := os.ReadFile(node + "/dev")
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var mm majmin
		if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &mm.major, &mm.minor); err != nil {
			return nil, fmt.Errorf("%s/dev: %w", node, err)
		}
		devs[mm] = node
	}
	return devs, nil
}

// checkUnmounted refuses devices mounted in our mount namespace.
func checkUnmounted(devs map[majmin]string) error {
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		_, ours := devs[majmin{m.Major, m.Minor}]
		return !ours, false
	})
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("%w: mounted on %s", ErrBusy, mounts[0].Mountpoint)
	}
	return nil
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

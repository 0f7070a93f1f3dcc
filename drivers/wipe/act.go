package wipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/drivers/device"
)

// Do runs the plan's steps in order, saying each on log, and stops at
// the first that fails. The last step checks the blank rule; only then
// is the device blank.
func Do(ctx context.Context, t Target, steps []Step, o Options, log io.Writer) error {
	for _, s := range steps {
		fmt.Fprintln(log, "→", s.Says)
		if err := do(ctx, t, s, o, log); err != nil {
			return fmt.Errorf("%s: %w", s.Says, err)
		}
	}
	return nil
}

func do(ctx context.Context, t Target, s Step, o Options, log io.Writer) error {
	switch s.Kind {
	case Wipefs:
		return run(ctx, log, "wipefs", "--all", s.Path)
	case ZeroEdges:
		return withDevice(t.Device, func(f *os.File) error {
			zero := make([]byte, Edge)
			if _, err := f.WriteAt(zero, 0); err != nil {
				return err
			}
			_, err := f.WriteAt(zero, t.Size-Edge)
			return err
		})
	case DropPartitions:
		return dropPartitions(ctx, t, o, log)
	case Discard:
		return withDevice(t.Device, func(f *os.File) error { return discard(f, t.Size, log) })
	case ZeroSample:
		return withDevice(t.Device, func(f *os.File) error { return zeroSample(f, t) })
	case Verify:
		v, err := blockfs.IsBlank(ctx, t.Device, blockfs.ExamineOptions{SysRoot: o.SysRoot})
		if err != nil {
			return err
		}
		if !v.Blank {
			return fmt.Errorf("still not blank (%s): %s", v.Reason, v.Message)
		}
		return nil
	}
	return fmt.Errorf("unknown step %d", s.Kind)
}

// withDevice opens the device for writing, exclusively: nobody mounts
// or claims it while wipe writes.
func withDevice(dev string, fn func(*os.File) error) error {
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dropPartitions has the kernel forget every partition of the disk
// (its table is gone) and checks that it did.
func dropPartitions(ctx context.Context, t Target, o Options, log io.Writer) error {
	var st unix.Stat_t
	if err := unix.Stat(t.Device, &st); err != nil {
		return err
	}
	_ = run(ctx, log, "partx", "-d", t.Device) // wipefs may have had them dropped already
	dir := fmt.Sprintf("%s/dev/block/%d:%d", o.sys(), unix.Major(st.Rdev), unix.Minor(st.Rdev))
	left, err := device.Partitions(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("the kernel still lists %d partition(s) of %s", len(left), t.Device)
	}
	return nil
}

// discard sends BLKDISCARD over the whole device. A device that
// refuses it is zeroed where the blank rule reads instead.
func discard(f *os.File, size int64, log io.Writer) error {
	rng := [2]uint64{0, uint64(size)}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, unix.BLKDISCARD, uintptr(unsafe.Pointer(&rng[0])))
	}); err != nil {
		return err
	}
	switch {
	case errno == 0:
		return nil
	case errors.Is(errno, unix.EOPNOTSUPP), errors.Is(errno, unix.ENOTTY):
		fmt.Fprintf(log, "  the device refuses discards (%v): zeroing instead\n", errno)
		return nil
	}
	return fmt.Errorf("BLKDISCARD: %w", errno)
}

// zeroSample zeroes each region the blank rule reads that is not zero.
func zeroSample(f *os.File, t Target) error {
	zero := make([]byte, Edge)
	buf := make([]byte, Edge)
	for _, r := range blockfs.ZeroRegions(t.Size, blockfs.ZeroSeed(t.Size)) {
		for off := r[0]; off < r[0]+r[1]; off += Edge {
			n := min(Edge, r[0]+r[1]-off)
			if _, err := f.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if bytes.Equal(buf[:n], zero[:n]) {
				continue
			}
			if _, err := f.WriteAt(zero[:n], off); err != nil {
				return err
			}
		}
	}
	return nil
}

func run(ctx context.Context, log io.Writer, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l != "" {
			fmt.Fprintln(log, "  "+l)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

package blockfs

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Mkfs creates a filesystem of type fstype (ext4, xfs or btrfs) on device,
// with the given UUID when uuid is not "" (so that the filesystem a format
// was making can be recognised after a crash). Callers must have checked
// that the device is blank. -F is given to
// mkfs.ext4 only because it otherwise asks on a terminal when it sees a
// whole disk; xfs and btrfs keep their own "existing filesystem" checks as
// a last line of defence.
func Mkfs(ctx context.Context, device, fstype, uuid string, extra []string) error {
	var prog string
	var args []string
	switch fstype {
	case "ext4":
		prog, args = "mkfs.ext4", []string{"-q", "-F"}
	case "xfs":
		prog, args = "mkfs.xfs", []string{"-q"}
	case "btrfs":
		prog, args = "mkfs.btrfs", []string{"-q"}
	default:
		return fmt.Errorf("mkfs %s: unsupported filesystem type %q", device, fstype)
	}
	args = append(args, uuidArgs(fstype, uuid)...)
	args = append(args, extra...)
	args = append(args, device)
	if err := run(ctx, prog, args...); err != nil {
		return fmt.Errorf("mkfs %s on %s: %w", fstype, device, err)
	}
	return nil
}

// Grow grows the filesystem mounted at mountpoint (on device) to fill the
// device. It is a no-op for the tools when there is nothing to grow.
func Grow(ctx context.Context, fstype, device, mountpoint string) error {
	var err error
	switch fstype {
	case "ext2", "ext3", "ext4":
		err = run(ctx, "resize2fs", device)
	case "xfs":
		err = run(ctx, "xfs_growfs", mountpoint)
	case "btrfs":
		err = run(ctx, "btrfs", "filesystem", "resize", "max", mountpoint)
	default:
		err = fmt.Errorf("unsupported filesystem type %q", fstype)
	}
	if err != nil {
		return fmt.Errorf("grow %s %s at %s: %w", fstype, device, mountpoint, err)
	}
	return nil
}

// run runs prog with args (no shell) and puts its stderr in the error.
func run(ctx context.Context, prog string, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("%s: %w (%s)", prog, ctxErr, msg)
		}
		if msg == "" {
			return fmt.Errorf("%s: %w", prog, err)
		}
		return fmt.Errorf("%s: %w: %s", prog, err, msg)
	}
	return nil
}

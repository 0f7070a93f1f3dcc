package blockfs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/volumed/volumed/internal/filesystem"
	"github.com/volumed/volumed/internal/size"
)

// Mkfs creates a filesystem of type fstype (one internal/filesystem knows)
// on device, with the given UUID when uuid is not "" (so that the
// filesystem a format was making can be recognised after a crash), and
// extra (a manifest's mkfsOptions) after volumed's own arguments.
// Callers must have checked that the device is blank; xfs and btrfs keep
// their own "existing filesystem" checks as a last line of defence.
func Mkfs(ctx context.Context, device, fstype, uuid string, extra []string) error {
	t, ok := filesystem.Lookup(fstype)
	if !ok {
		return fmt.Errorf("mkfs %s: unsupported filesystem type %q", device, fstype)
	}
	// The tools refuse a device too small in words of their own (xfs in
	// decimal MB); this says it in a manifest's units, before running one.
	if n, err := sizeOf(device); err == nil && n < t.MinSize {
		return fmt.Errorf("mkfs %s on %s: the device holds %s, and %s needs at least %s", fstype, device, size.Format(n), fstype, size.Format(t.MinSize))
	}
	if err := run(ctx, t.Mkfs.Program, t.Mkfs.Command(device, uuid, false, extra)...); err != nil {
		return fmt.Errorf("mkfs %s on %s: %w", fstype, device, err)
	}
	return nil
}

// Grow grows the filesystem mounted at mountpoint (on device) to fill the
// device. It is a no-op for the tools when there is nothing to grow.
func Grow(ctx context.Context, fstype, device, mountpoint string) error {
	t, ok := filesystem.Of(fstype)
	err := fmt.Errorf("unsupported filesystem type %q", fstype)
	if ok {
		err = run(ctx, t.Grow.Program, t.Grow.Command(device, mountpoint)...)
	}
	if err != nil {
		return fmt.Errorf("grow %s %s at %s: %w", fstype, device, mountpoint, err)
	}
	return nil
}

// sizeOf is the size of a block device or an image file.
func sizeOf(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if fi.Mode().IsRegular() {
		return fi.Size(), nil
	}
	return DeviceSize(path)
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

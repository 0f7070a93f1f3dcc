package nvme

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Fabrics creates controllers. The real one is the kernel's
// /dev/nvme-fabrics (DevFabrics); tests put a fake of that device here.
type Fabrics interface {
	// Connect hands the option string to the kernel in one write and
	// returns the reply ("instance=N,cntlid=M") read on the same file
	// descriptor. The options may hold a secret: an implementation never
	// puts them in an error or a log.
	Connect(ctx context.Context, options string) (reply string, err error)
}

// DevFabrics is the kernel's fabrics control device.
type DevFabrics struct {
	Path string // "" means /dev/nvme-fabrics
}

// Connect writes options to the device and reads the reply. The write
// blocks until the kernel has connected the admin and I/O queues or
// failed to; its own connect timeouts bound it, and ctx, which a blocked
// write cannot notice, is only checked before.
func (d DevFabrics) Connect(ctx context.Context, options string) (string, error) {
	path := d.Path
	if path == "" {
		path = "/dev/nvme-fabrics"
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return "", fmt.Errorf("open %s: %w (is the nvme-fabrics module loaded?)", path, err)
	}
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	// One write: the kernel parses exactly what one write(2) carries and
	// refuses a second connect on the same descriptor.
	n, err := unix.Write(fd, []byte(options))
	if err != nil {
		return "", fmt.Errorf("write %s: %w%s", path, err, writeHint(err))
	}
	if n != len(options) {
		return "", fmt.Errorf("write %s: short write (%d of %d bytes)", path, n, len(options))
	}
	buf := make([]byte, 256)
	n, err = unix.Read(fd, buf)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return string(buf[:n]), nil
}

func writeHint(err error) string {
	switch {
	case errors.Is(err, unix.EINVAL):
		return " (the kernel refused the options or the target refused the host; the kernel log names the reason)"
	case errors.Is(err, unix.EALREADY):
		return " (a controller to this subsystem and address exists already)"
	case errors.Is(err, unix.ENOMEM):
		return " (the option string is too long, or the kernel is out of memory)"
	}
	return ""
}

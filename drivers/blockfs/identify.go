package blockfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/volumed/volumed/internal/filesystem"
)

// Info is what a filesystem says of itself without being mounted.
type Info struct {
	UUID string
	// EverMounted: the filesystem records that it has been mounted
	// (ext2/3/4 keep a mount count and time in the superblock). False
	// also when the type keeps no such record (xfs, btrfs).
	EverMounted bool
	// Bytes is the size the filesystem spans by its superblock (0 when
	// volumed does not read its type).
	Bytes int64
}

// Inspect reads the filesystem UUID of device (the superblock itself,
// never the udev cache) and whether it was ever mounted: an ext2/3/4
// that the probe finds alone is read here (inspectExt), anything else by
// `blkid -p`.
func Inspect(ctx context.Context, device string) (Info, error) {
	if info, ok, err := inspectExt(device); err != nil || ok {
		return info, err
	}
	return inspectBlkid(ctx, device)
}

// inspectBlkid is Inspect by `blkid -p`.
func inspectBlkid(ctx context.Context, device string) (Info, error) {
	out, code, err := blkidExport(ctx, "blkid", device)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w", device, err)
	}
	if code != 0 {
		return Info{}, nil
	}
	var info Info
	typ := ""
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "UUID":
			info.UUID = strings.ToLower(v)
		case "TYPE":
			typ = v
		}
	}
	n, err := superblockBytes(device, typ)
	if err != nil {
		return Info{}, err
	}
	info.Bytes = n
	if t, ok := filesystem.Of(typ); ok && t.MountRecord {
		mounted, err := extEverMounted(device)
		if err != nil {
			return Info{}, err
		}
		info.EverMounted = mounted
	}
	return info, nil
}

// extEverMounted reads the ext superblock's mount count and last mount
// time.
func extEverMounted(device string) (bool, error) {
	f, err := os.Open(device)
	if err != nil {
		return false, fmt.Errorf("read superblock of %s: %w", device, err)
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return false, fmt.Errorf("read superblock of %s: %w", device, err)
	}
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
		return false, fmt.Errorf("read superblock of %s: no ext magic", device)
	}
	return extMounted(sb), nil
}

// extMounted: mke2fs leaves the mount count and last mount time zero,
// the kernel sets them at the first read-write mount.
func extMounted(sb []byte) bool {
	mtime := binary.LittleEndian.Uint32(sb[0x2C:])
	count := binary.LittleEndian.Uint16(sb[0x34:])
	return mtime != 0 || count != 0
}

// CheckResult is a read-only checker's verdict.
type CheckResult int

// CheckResult values.
const (
	// CheckUnknown: the checker could not tell (a log to replay, a
	// missing tool, an operational error).
	CheckUnknown CheckResult = iota
	CheckClean
	CheckDamaged
)

// CheckReadOnly runs the filesystem's own checker without letting it
// write anything (e2fsck -n, xfs_repair -n, btrfs check --readonly) and
// reads its verdict from the exit status. The error carries the tool's
// output when the verdict is not Clean.
func CheckReadOnly(ctx context.Context, fstype, device string) (CheckResult, error) {
	t, ok := filesystem.Of(fstype)
	if !ok {
		return CheckUnknown, fmt.Errorf("no read-only checker for %q", fstype)
	}
	prog, args, damaged := t.Check.Program, t.Check.Command(device), t.Check.Damaged
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return CheckClean, nil
	case errors.As(err, &ee) && ctx.Err() == nil && damaged(ee.ExitCode()):
		return CheckDamaged, fmt.Errorf("%s: %w: %s", prog, err, lastLines(out.String(), 3))
	default:
		return CheckUnknown, fmt.Errorf("%s: %w: %s", prog, err, lastLines(out.String(), 3))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

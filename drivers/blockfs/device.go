package blockfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/sysfs"
)

// blkidNothingFound is blkid's exit status for "no signature".
const (
	blkidNothingFound = 2
	blkidAmbivalent   = 8
)

// ProbeDevice probes the block device or image file at path with Probe
// and, when blkid is installed, with `blkid -p` as a second opinion. blkid
// knows far more formats than Probe; Probe knows places blkid does not look
// (a GPT whose protective MBR and primary header are gone). The result is
// the union. Any failure to look is an error, never an empty result.
func ProbeDevice(ctx context.Context, path string) ([]Signature, error) {
	return ProbeDeviceWith(ctx, path, ProbeOptions{})
}

// ProbeOptions tune ProbeDevice.
type ProbeOptions struct {
	// BlkidOnlyIfBlank asks blkid only when Probe found nothing. blkid's
	// second opinion guards the one irreversible decision — formatting a
	// device that looks blank — and costs a fork+exec per call;
	// a device Probe already recognises is not formatted anyway.
	BlkidOnlyIfBlank bool
}

// ProbeDeviceWith is ProbeDevice with options.
func ProbeDeviceWith(ctx context.Context, path string, o ProbeOptions) ([]Signature, error) {
	r, f, err := openDirect(path)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	defer f.Close()
	size, err := deviceSize(f)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	sigs, err := Probe(r, size)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	if o.BlkidOnlyIfBlank && len(sigs) > 0 {
		return sigs, nil
	}
	blkid, err := exec.LookPath("blkid")
	if err != nil {
		return sigs, nil
	}
	more, err := runBlkid(ctx, blkid, path)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	return append(sigs, more...), nil
}

// openDirect opens path for reading around the page cache (O_DIRECT),
// or through it where that is refused (EINVAL: a filesystem without
// direct I/O). The probe's windows, cached, were dropped again by the
// mount that follows (which sets the device's block size), so caching
// them only cost time (docs/performance.md has what was measured). A
// direct read still sees what was written through the cache: the
// kernel writes the range back first.
func openDirect(path string) (io.ReaderAt, *os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_DIRECT, 0)
	if err == nil {
		return directReader{f}, f, nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return nil, nil, err
	}
	f, err = os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	return f, f, err
}

// directAlign is the alignment direct I/O needs of offsets, lengths and
// buffers: the largest logical block size in use.
const directAlign = 4 * kib

// directReader reads an O_DIRECT file at any offset and length, through
// an aligned buffer that covers the range.
type directReader struct{ f *os.File }

func (d directReader) ReadAt(b []byte, off int64) (int, error) {
	start := off &^ (directAlign - 1)
	end := (off + int64(len(b)) + directAlign - 1) &^ (directAlign - 1)
	buf := alignedBuf(int(end - start))
	n, err := d.f.ReadAt(buf, start)
	if n <= int(off-start) {
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	c := copy(b, buf[off-start:n])
	if c < len(b) && err == nil {
		err = io.EOF // the device ended
	}
	if c == len(b) {
		err = nil
	}
	return c, err
}

// alignedBuf is n bytes starting at a multiple of directAlign.
func alignedBuf(n int) []byte {
	raw := make([]byte, n+directAlign)
	skip := int(-uintptr(unsafe.Pointer(&raw[0])) & (directAlign - 1))
	return raw[skip : skip+n : skip+n]
}

// deviceSize is the size of a block device (BLKGETSIZE64) or regular file.
func deviceSize(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	switch {
	case fi.Mode().IsRegular():
		return fi.Size(), nil
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		var size uint64
		rc, err := f.SyscallConn()
		if err != nil {
			return 0, err
		}
		var ioErr error
		if err := rc.Control(func(fd uintptr) {
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
			if errno != 0 {
				ioErr = errno
			}
		}); err != nil {
			return 0, err
		}
		if ioErr != nil {
			return 0, fmt.Errorf("BLKGETSIZE64: %w", ioErr)
		}
		if size > 1<<62 {
			return 0, fmt.Errorf("BLKGETSIZE64: implausible size %d", size)
		}
		return int64(size), nil
	default:
		return 0, fmt.Errorf("not a block device or regular file (mode %v)", fi.Mode())
	}
}

// blkidExport runs `blkid -p -o export` (the superblocks themselves,
// never the udev cache) and returns its output and exit status; err is
// set only when blkid did not answer.
func blkidExport(ctx context.Context, blkid, path string) ([]byte, int, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, blkid, "-p", "-o", "export", path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.Bytes(), 0, nil
	case errors.As(err, &ee) && ctx.Err() == nil && (ee.ExitCode() == blkidNothingFound || ee.ExitCode() == blkidAmbivalent):
		return stdout.Bytes(), ee.ExitCode(), nil
	case ctx.Err() != nil:
		return nil, -1, fmt.Errorf("blkid: %w", ctx.Err())
	}
	return nil, -1, fmt.Errorf("blkid: %w: %s", err, strings.TrimSpace(stderr.String()))
}

func runBlkid(ctx context.Context, blkid, path string) ([]Signature, error) {
	out, code, err := blkidExport(ctx, blkid, path)
	switch {
	case err != nil:
		return nil, err
	case code == blkidNothingFound:
		return nil, nil
	case code == blkidAmbivalent:
		// Several filesystems claim the device (leftovers of an old one):
		// blkid refuses to name one, which is itself proof of content.
		return []Signature{{Type: "ambivalent", Usage: UsageOther, Offset: -1, Source: SourceBlkid}}, nil
	}
	return parseBlkidExport(out), nil
}

// parseBlkidExport turns `blkid -p -o export` output into signatures.
func parseBlkidExport(out []byte) []Signature {
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			kv[k] = v
		}
	}
	offset := func(key string) int64 {
		if n, err := strconv.ParseInt(kv[key], 10, 64); err == nil {
			return n
		}
		return -1
	}
	var sigs []Signature
	if t := kv["TYPE"]; t != "" {
		usage := kv["USAGE"]
		if usage == "" {
			usage = UsageOther
		}
		sigs = append(sigs, Signature{Type: t, Usage: usage, Offset: offset("SBMAGIC_OFFSET"), Source: SourceBlkid})
	}
	if t := kv["PTTYPE"]; t != "" {
		sigs = append(sigs, Signature{Type: t, Usage: UsagePartitionTable, Offset: offset("PTMAGIC_OFFSET"), Source: SourceBlkid})
	}
	return sigs
}

// DeviceSize is the size in bytes of the block device at path as the
// kernel sees it now, read from sysfs: the device is never opened, so a
// device whose transport is down cannot hang the caller.
func DeviceSize(path string) (int64, error) {
	dir, err := sysfs.BlockDir("", path)
	if err != nil {
		return 0, err
	}
	return sysfs.Size(dir)
}

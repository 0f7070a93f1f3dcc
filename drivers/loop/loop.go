// Package loop attaches image files to loop devices with the kernel's
// ioctls (LOOP_CTL_GET_FREE, LOOP_CONFIGURE, LOOP_GET_STATUS64,
// LOOP_CLR_FD, LOOP_SET_CAPACITY); it never runs losetup.
//
// A loop device is identified by the st_dev and st_ino of its backing
// file as the kernel reports them, never by its node name alone: /dev/loopN
// is reused for a different image as soon as it is free.
//
// Ownership tag: the brief was to keep the tag in lo_crypt_name, but
// kernels since 5.19 (cryptoloop removal) no longer store that field and
// LOOP_GET_STATUS64 returns it zeroed. The tag is therefore kept in
// lo_file_name, which the kernel stores verbatim and which nothing else
// reads while sysfs exists (losetup and this package take the backing
// file's path from /sys/block/loopN/loop/backing_file). A tagged device
// carries "tag:<Tag>" there instead of the image path.
package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/fanout"
	"github.com/volumed/volumed/internal/keyed"
	"github.com/volumed/volumed/internal/safepath"
	"github.com/volumed/volumed/internal/sysfs"
)

var (
	// ErrIdentity: the loop device now backs a different file than the
	// caller believes.
	ErrIdentity = errors.New("loop device backs a different file")
	// ErrBusy: the loop device is in use (mounted, held by another
	// block device, or claimed exclusively) and was left attached.
	ErrBusy = errors.New("loop device is busy")
)

const (
	sysBlock    = "/sys/block"
	loopControl = "/dev/loop-control"
	// tagPrefix marks lo_file_name as carrying our tag rather than a
	// path; paths written there by other tools are absolute.
	tagPrefix = "tag:"
	// MaxTagLen is the longest tag that fits in lo_file_name after the
	// prefix and the kernel's terminating NUL.
	MaxTagLen = unix.LO_NAME_SIZE - 1 - len(tagPrefix)
	// attachTries bounds the retries when other processes keep taking
	// the free device LOOP_CTL_GET_FREE handed us.
	attachTries = 32
	// settleTimeout bounds the wait for a cleared device to show as
	// unbound: after LOOP_CLR_FD the kernel detaches on the last close,
	// which is immediate unless another process holds the node open.
	settleTimeout = 10 * time.Second
)

// Device is a bound loop device as the kernel reports it.
type Device struct {
	Path        string // /dev/loopN
	Number      int
	BackingFile string // sysfs backing_file, " (deleted)" stripped
	Deleted     bool   // the backing file has been unlinked
	BackingDev  uint64 // st_dev of the backing file (lo_device)
	BackingIno  uint64 // st_ino of the backing file (lo_inode)
	ReadOnly    bool
	Tag         string // ownership tag given to Attach, "" if none
	SizeBytes   int64  // size of the block device
}

// Options describe an attachment.
type Options struct {
	File     string
	ReadOnly bool   // LO_FLAGS_READ_ONLY, and the file is opened O_RDONLY
	Tag      string // ownership marker kept by the kernel, at most MaxTagLen bytes
	DirectIO bool   // LO_FLAGS_DIRECT_IO
}

// Identity renders a stable identity for records: the kernel's backing
// file path plus its device and inode numbers.
func (d Device) Identity() string {
	return fmt.Sprintf("loop:%s@%d:%d", d.BackingFile, d.BackingDev, d.BackingIno)
}

// ParseIdentity reads back what Identity rendered: the backing file's
// path when the device was seen, and its device and inode numbers, which
// are what identify it (the path may since name another file, or none).
func ParseIdentity(id string) (file string, dev, ino uint64, ok bool) {
	rest, ok := strings.CutPrefix(id, "loop:")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return "", 0, 0, false
	}
	devStr, inoStr, ok := strings.Cut(rest[at+1:], ":")
	if !ok {
		return "", 0, 0, false
	}
	dev, err1 := strconv.ParseUint(devStr, 10, 64)
	ino, err2 := strconv.ParseUint(inoStr, 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return rest[:at], dev, ino, true
}

func (d Device) sameFile(o Device) bool {
	return d.BackingDev == o.BackingDev && d.BackingIno == o.BackingIno
}

func devPath(n int) string { return "/dev/loop" + strconv.Itoa(n) }

func sysPath(n int, elem ...string) string {
	return filepath.Join(append([]string{sysBlock, "loop" + strconv.Itoa(n)}, elem...)...)
}

// FileIdentity returns st_dev and st_ino of file (symlinks followed), in
// the encoding LOOP_GET_STATUS64 uses, so callers can compare a file with
// a Device.
func FileIdentity(file string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return 0, 0, &os.PathError{Op: "stat", Path: file, Err: err}
	}
	return st.Dev, st.Ino, nil
}

// Attach binds a free loop device to o.File and returns the device as
// the kernel reports it. It does not look for an existing attachment.
func Attach(ctx context.Context, o Options) (*Device, error) {
	d, err := attach(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", o.File, err)
	}
	return d, nil
}

func attach(ctx context.Context, o Options) (*Device, error) {
	if o.File == "" {
		return nil, errors.New("no image file given")
	}
	if len(o.Tag) > MaxTagLen || strings.IndexByte(o.Tag, 0) >= 0 {
		return nil, fmt.Errorf("tag %q: longer than %d bytes or contains NUL", o.Tag, MaxTagLen)
	}
	file, err := openImage(o.File, o.ReadOnly)
	if err != nil {
		return nil, err
	}
	defer unix.Close(file)

	ctl, err := unix.Open(loopControl, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: loopControl, Err: err}
	}
	defer unix.Close(ctl)

	cfg := unix.LoopConfig{Fd: uint32(file)}
	if o.ReadOnly {
		cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
	}
	if o.DirectIO {
		cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
	}
	if o.Tag != "" {
		copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], tagPrefix+o.Tag)
	} else {
		copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], o.File)
	}

	backoff := time.Millisecond
	for try := 1; ; try++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		d, err := configure(n, &cfg)
		if err == nil {
			return d, nil
		}
		// EBUSY: another process bound this device between GET_FREE
		// and our LOOP_CONFIGURE; ask for another one.
		if !errors.Is(err, unix.EBUSY) || try >= attachTries {
			return nil, err
		}
		if err := sleep(ctx, backoff); err != nil {
			return nil, err
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// openImage opens the image refusing anything but a regular file: a
// symlink in any component of its path (a swapped link must not point
// the loop device at another file or a disk) and devices or FIFOs
// (O_NONBLOCK keeps a FIFO from blocking the open).
func openImage(file string, readOnly bool) (int, error) {
	mode := unix.O_RDWR
	if readOnly {
		mode = unix.O_RDONLY
	}
	f, err := safepath.OpenFile(file, mode|unix.O_CLOEXEC|unix.O_NONBLOCK)
	if err != nil {
		return -1, err
	}
	// A descriptor of our own: the *os.File would close its own.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return -1, &os.PathError{Op: "dup", Path: file, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "stat", Path: file, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: not a regular file", file)
	}
	if st.Size == 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: image is empty", file)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: clear O_NONBLOCK: %w", file, err)
	}
	return fd, nil
}

func configure(n int, cfg *unix.LoopConfig) (*Device, error) {
	// The node is opened read-write even for a read-only attachment:
	// the kernel forces read-only on a device configured through a
	// read-only open, and LO_FLAGS_READ_ONLY already says what we want.
	fd, err := unix.Open(devPath(n), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: devPath(n), Err: err}
	}
	defer unix.Close(fd)
	if err := unix.IoctlLoopConfigure(fd, cfg); err != nil {
		return nil, fmt.Errorf("LOOP_CONFIGURE %s: %w", devPath(n), err)
	}
	d, err := readDevice(n, fd)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("%s: unbound right after LOOP_CONFIGURE", devPath(n))
	}
	return d, nil
}

// Get reads loop device number n; (nil, nil) if it is not bound.
func Get(number int) (*Device, error) {
	if number < 0 {
		return nil, fmt.Errorf("loop device number %d out of range", number)
	}
	var st unix.Stat_t
	if err := unix.Stat(sysPath(number, "loop"), &st); errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	return getListed(number)
}

// getListed is Get of a device /sys/block lists, whose node is opened
// without first asking sysfs whether it is bound: the status read
// answers that too (ENXIO), and the sysfs lookup was a fifth of what
// listing the loop devices cost (docs/performance.md).
func getListed(number int) (*Device, error) {
	// Holding the node open keeps the device bound (a concurrent
	// LOOP_CLR_FD only takes effect on the last close), so sysfs and
	// the status read below describe the same binding.
	fd, err := unix.Open(devPath(number), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT) {
		return nil, nil // being torn down, or removed since listed
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: devPath(number), Err: err}
	}
	defer unix.Close(fd)
	return readDevice(number, fd)
}

// readDevice describes the device open as fd; (nil, nil) if unbound.
func readDevice(n, fd int) (*Device, error) {
	info, err := unix.IoctlLoopGetStatus64(fd)
	if errors.Is(err, unix.ENXIO) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("LOOP_GET_STATUS64 %s: %w", devPath(n), err)
	}
	backing, err := sysfs.Text(sysPath(n), "loop", "backing_file")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The size from the node already open, not from sysfs: each sysfs
	// attribute is an open, a read and a close, and reading loop
	// devices is most of a restart (docs/performance.md).
	size, err := blockSize(fd)
	if err != nil {
		return nil, fmt.Errorf("size of %s: %w", devPath(n), err)
	}
	d := &Device{
		Path:        devPath(n),
		Number:      n,
		BackingFile: backing,
		BackingDev:  info.Device,
		BackingIno:  info.Inode,
		ReadOnly:    info.Flags&unix.LO_FLAGS_READ_ONLY != 0,
		Tag:         tagFromName(info.File_name[:]),
		SizeBytes:   size,
	}
	if f, ok := strings.CutSuffix(d.BackingFile, deletedSuffix); ok {
		d.BackingFile, d.Deleted = f, true
	}
	return d, nil
}

// blockSize is the size in bytes of the block device open as fd.
func blockSize(fd int) (int64, error) {
	var size uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); errno != 0 {
		return 0, fmt.Errorf("BLKGETSIZE64: %w", errno)
	}
	return int64(size), nil
}

func tagFromName(name []byte) string {
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	tag, ok := strings.CutPrefix(string(name), tagPrefix)
	if !ok {
		return ""
	}
	return tag
}

// listWorkers read loop devices at once: each Get is a few sysfs
// lookups and, for a bound device, an open and close of its node, which
// wait in the kernel more than they compute. One after another they were
// most of a restart (docs/performance.md).
const listWorkers = 8

// List returns every bound loop device, in no particular order.
func List() ([]Device, error) {
	ents, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, err
	}
	var nums []int
	for _, e := range ents {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "loop"))
		if err == nil && strings.HasPrefix(e.Name(), "loop") {
			nums = append(nums, n)
		}
	}
	devs := make([]*Device, len(nums))
	errs := make([]error, len(nums))
	fanout.Each(len(nums), listWorkers, func(i int) { devs[i], errs[i] = getListed(nums[i]) })
	var out []Device
	for i, d := range devs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	return out, nil
}

// Find returns every loop device backed by the same file (st_dev and
// st_ino) as file. Only devices whose sysfs backing_file names the file's
// real path are opened and checked by identity: reading one sysfs
// attribute per device keeps Find cheap with hundreds of loop devices.
// (A device bound through another hard link of the same inode is
// therefore not found.) An image renamed away and replaced by another
// file of the same name is a different image: the identity check says so.
func Find(file string) ([]Device, error) { return new(Index).Find(file) }

func sleep(ctx context.Context, d time.Duration) error { return keyed.Sleep(ctx, d) }

// deletedSuffix is what the kernel appends to the path of a backing file
// that has been unlinked.
const deletedSuffix = " (deleted)"

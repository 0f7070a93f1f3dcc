// Package sysfs reads what the kernel publishes under /sys: one
// attribute (text or binary), a count, a block device's size and numbers, its
// partitions and holders. Every driver reads sysfs through it, so an
// attribute is trimmed, bounded and parsed one way.
package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is where sysfs is mounted; callers take a root of their own ("")
// so tests can point them at a tree of the same shape.
const Root = "/sys"

// RootOr is root, or Root when root is "".
func RootOr(root string) string {
	if root == "" {
		return Root
	}
	return root
}

// maxAttr bounds what one attribute read takes: a sysfs attribute is at
// most a page, and a fixture or a bug larger than that is not read
// into memory.
const maxAttr = 8192

// Attr reads the attribute at dir joined with elem, trimmed of the
// newline and of the blank or NUL padding some devices give their
// identifiers.
func Attr(dir string, elem ...string) (string, error) {
	s, err := read(dir, elem)
	return strings.Trim(s, " \t\r\n\x00"), err
}

// Text reads an attribute that holds text as given, such as a file's
// path, which may begin or end with blanks: only the newline the
// kernel ends it with is dropped.
func Text(dir string, elem ...string) (string, error) {
	s, err := read(dir, elem)
	return strings.TrimSuffix(s, "\n"), err
}

// maxBinary bounds a binary attribute: the longest is a SCSI VPD page,
// a 4-byte header and a length of 16 bits.
const maxBinary = 4 + 1<<16 - 1

// Bytes reads a binary attribute (a SCSI VPD page) as the kernel gives
// it, untrimmed; one longer than any such page is refused, not cut
// short, since a part of a binary record would parse as something else.
func Bytes(dir string, elem ...string) ([]byte, error) {
	b, err := readBytes(dir, elem, maxBinary+1)
	if err == nil && len(b) > maxBinary {
		return nil, fmt.Errorf("%s: longer than %d bytes", filepath.Join(append([]string{dir}, elem...)...), maxBinary)
	}
	return b, err
}

func read(dir string, elem []string) (string, error) {
	b, err := readBytes(dir, elem, maxAttr)
	return string(b), err
}

// readBytes reads at most limit bytes of the attribute. It reads with
// the bare system calls: an os.File registers a sysfs file with the
// poller (kernfs files are pollable) and leaves a cleanup for the
// collector, which doubled what a read of one attribute cost, and a
// restart reads a few per volume (docs/performance.md).
func readBytes(dir string, elem []string, limit int64) ([]byte, error) {
	p := filepath.Join(append([]string{dir}, elem...)...)
	fd, err := openRead(p)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, min(limit, firstRead))
	for int64(len(b)) < limit {
		if len(b) == cap(b) {
			b = slices.Grow(b, int(min(int64(cap(b)), limit-int64(len(b)))))
		}
		n, err := readOnce(fd, b[len(b):cap(b)])
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	return b, nil
}

// firstRead fits almost every attribute (a count, a name, a path) in
// one read; a longer one grows the buffer.
const firstRead = 256

func openRead(p string) (int, error) {
	for {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func readOnce(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// AttrOr is Attr, "" when the attribute cannot be read: for what is
// only ever compared against a known value.
func AttrOr(dir string, elem ...string) string {
	s, _ := Attr(dir, elem...)
	return s
}

// maxCount is the largest count taken as true: 2^53 sectors (4 EiB)
// still fit an int64 once made bytes.
const maxCount = 1 << 53

// Count reads an attribute that holds a non-negative decimal count.
func Count(dir string, elem ...string) (int64, error) {
	s, err := Attr(dir, elem...)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > maxCount {
		return 0, fmt.Errorf("%s: %q is not a count", filepath.Join(append([]string{dir}, elem...)...), s)
	}
	return v, nil
}

// SectorSize is the unit of sysfs's size and start attributes, whatever
// the device's logical block size.
const SectorSize = 512

// Size reads the size in bytes of the block device (or partition) whose
// sysfs directory is dir.
func Size(dir string) (int64, error) {
	n, err := Count(dir, "size")
	return n * SectorSize, err
}

// DevNumber reads the "major:minor" of the block device at dir.
func DevNumber(dir string) (major, minor uint32, err error) {
	s, err := Attr(dir, "dev")
	if err != nil {
		return 0, 0, err
	}
	ma, mi, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseUint(ma, 10, 32)
	b, err2 := strconv.ParseUint(mi, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%s/dev: %q is not major:minor", dir, s)
	}
	return uint32(a), uint32(b), nil
}

// BlockDir is the sysfs directory (below root, "" for /sys) of the block
// device whose node is dev: /sys/dev/block/MAJOR:MINOR, which links to
// the device's own directory. The directory is not checked to exist.
func BlockDir(root, dev string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: dev, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", fmt.Errorf("%s is not a block device", dev)
	}
	return NumberDir(root, unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
}

// Name is the kernel's name of the block device whose node is dev (a
// device-mapper node /dev/mapper/x is dm-N to the kernel), read from
// where its sysfs directory links.
func Name(root, dev string) (string, error) {
	dir, err := BlockDir(root, dev)
	if err != nil {
		return "", err
	}
	p, err := os.Readlink(dir)
	if err != nil {
		return "", err
	}
	return filepath.Base(p), nil
}

// NumberDir is the sysfs directory of the block device major:minor.
func NumberDir(root string, major, minor uint32) string {
	return filepath.Join(RootOr(root), "dev", "block", fmt.Sprintf("%d:%d", major, minor))
}

// IsPartition: the block device at dir is a partition of another.
func IsPartition(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "partition"))
	return err == nil
}

// Partitions lists the kernel names of the partitions of the whole disk
// at dir (its subdirectories that are partitions), sorted. Only its
// directories are asked: a disk's directory holds some twenty
// attributes and links, and a stat of each was a large share of the agent's
// CPU tearing down 1000 loop volumes (docs/performance.md, round 5).
func Partitions(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && IsPartition(filepath.Join(dir, e.Name())) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Holders lists the kernel names of what holds the block device at dir
// (device-mapper, md, bcache), sorted; none when it has no holders/.
func Holders(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "holders"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out, nil
}

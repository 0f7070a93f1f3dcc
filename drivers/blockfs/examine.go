package blockfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/blank"
	"github.com/volumed/volumed/internal/inuse"
	"github.com/volumed/volumed/internal/sysfs"
)

// ExamineOptions tune Examine.
type ExamineOptions struct {
	// Created: the caller created this image file itself (its intent
	// record says so) and has not formatted it since.
	Created bool
	// SysRoot is where sysfs is ("" is /sys).
	SysRoot string
}

// Examine gathers the facts the blank rule (internal/blank) decides on:
// every signature (volumed's probe, then blkid's), the partitions and
// holders the kernel has of a block device, and the bytes at the places
// data lives. What is already decided is not read further: a device
// with a signature is not read for zeros. Any failure to look is an
// error, never a fact.
func Examine(ctx context.Context, path string, o ExamineOptions) (blank.Facts, error) {
	f := blank.Facts{Device: path, Created: o.Created}
	sigs, err := ProbeDeviceWith(ctx, path, ProbeOptions{BlkidOnlyIfBlank: true})
	if err != nil {
		return f, err
	}
	for _, s := range sigs {
		f.Signatures = append(f.Signatures, blank.Signature(s))
	}
	if f.Partitions, f.Holders, err = KernelUsers(o.SysRoot, path); err != nil {
		return f, fmt.Errorf("examine %s: %w", path, err)
	}
	if len(f.Signatures) > 0 || len(f.Partitions) > 0 || len(f.Holders) > 0 || o.Created {
		return f, nil
	}
	if f.Zeros, err = ReadZerosAt(path); err != nil {
		return f, fmt.Errorf("examine %s: %w", path, err)
	}
	return f, nil
}

// ReadZerosAt opens path (direct I/O where it allows) and reads the
// blank rule's regions of it.
func ReadZerosAt(path string) (blank.Zeros, error) {
	r, file, err := openDirect(path)
	if err != nil {
		return blank.Zeros{}, err
	}
	defer file.Close()
	size, err := deviceSize(file)
	if err != nil {
		return blank.Zeros{}, err
	}
	return ReadZeros(r, size, ZeroSeed(size))
}

// KernelUsers lists, for a block device, the partitions the kernel has
// of it and what holds it or one of them (sysfs holders/), as kernel
// names; a regular file has neither.
func KernelUsers(sysRoot, path string) (parts, holders []string, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return nil, nil, nil
	}
	return SysfsUsers(sysfs.NumberDir(sysRoot, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
}

// SysfsUsers is KernelUsers from the device's sysfs directory.
func SysfsUsers(dir string) (parts, holders []string, err error) {
	if parts, err = sysfs.Partitions(dir); err != nil {
		return nil, nil, err
	}
	for _, node := range append([]string{""}, parts...) {
		hs, err := sysfs.Holders(filepath.Join(dir, node))
		if err != nil {
			return nil, nil, err
		}
		for _, h := range hs {
			holders = append(holders, inuse.Describe(filepath.Join(dir, node, "holders", h), node))
		}
	}
	sort.Strings(holders)
	return parts, holders, nil
}

// IsBlank examines path and applies the blank rule.
func IsBlank(ctx context.Context, path string, o ExamineOptions) (blank.Verdict, error) {
	f, err := Examine(ctx, path, o)
	if err != nil {
		return blank.Verdict{}, err
	}
	return blank.Decide(f), nil
}

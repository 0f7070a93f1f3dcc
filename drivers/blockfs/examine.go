package blockfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/blank"
	"github.com/volumed/volumed/internal/inuse"
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
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	dir := filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	return SysfsUsers(dir)
}

// SysfsUsers is KernelUsers from the device's sysfs directory.
func SysfsUsers(dir string) (parts, holders []string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	if holders, err = holdersOf(dir, ""); err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		sub := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(sub, "partition")); err != nil {
			continue
		}
		parts = append(parts, e.Name())
		hs, err := holdersOf(sub, e.Name())
		if err != nil {
			return nil, nil, err
		}
		holders = append(holders, hs...)
	}
	sort.Strings(parts)
	sort.Strings(holders)
	return parts, holders, nil
}

// holdersOf names what holds the device at dir (part is its name when
// it is a partition), as the in-use check names them.
func holdersOf(dir, part string) ([]string, error) {
	hs, err := names(filepath.Join(dir, "holders"))
	for i, h := range hs {
		hs[i] = inuse.Describe(filepath.Join(dir, "holders", h), part)
	}
	return hs, err
}

func names(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
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
	return out, nil
}

// IsBlank examines path and applies the blank rule.
func IsBlank(ctx context.Context, path string, o ExamineOptions) (blank.Verdict, error) {
	f, err := Examine(ctx, path, o)
	if err != nil {
		return blank.Verdict{}, err
	}
	return blank.Decide(f), nil
}

package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/volumed/volumed/internal/fanout"
	"github.com/volumed/volumed/internal/sysfs"
)

// Counted is one device's error count: N errors that filesystem type FS
// recorded, read from Path (the attribute, for a message), or the Err
// that kept it from being read.
type Counted struct {
	N    int64
	FS   string
	Path string
	Err  error
}

// ErrorCount reads how many errors the kernel has met on the filesystem
// of this type mounted from dev, which it keeps in the superblock and
// shows in sysfs (below root, "" for /sys) under the device's kernel
// name; path is the attribute, for a message. 0 when the type keeps no
// such count or nothing of it is mounted from dev.
func (t Type) ErrorCount(root, dev string) (n int64, path string, err error) {
	c := t.count(root, dev, nil)
	return c.N, c.Path, c.Err
}

// countWorkers read counters at once: each is a few lookups in sysfs
// that wait in the kernel more than they compute.
const countWorkers = 4

// ErrorCounts is ErrorCount of each of devs, in their order. The type's
// sysfs directory is listed once, and only the devices it lists (those
// with this type mounted) have their counter read: the reads were the
// largest part of a restart's health checks at 1000 volumes
// (docs/performance.md).
func (t Type) ErrorCounts(root string, devs []string) []Counted {
	out := make([]Counted, len(devs))
	if !t.ErrorCounters || len(devs) == 0 {
		return out
	}
	mounted, err := t.mountedNames(root)
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	fanout.Each(len(devs), countWorkers, func(i int) { out[i] = t.count(root, devs[i], mounted) })
	return out
}

// mountedNames lists the kernel names of the devices with a filesystem
// of this type mounted, as its sysfs directory shows them; none when the
// directory is not there (the module not loaded, nothing ever mounted).
func (t Type) mountedNames(root string) (map[string]bool, error) {
	dir := filepath.Join(sysfs.RootOr(root), "fs", t.Name)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s error counts: %w", t.Name, err)
	}
	names := make(map[string]bool, len(ents))
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names, nil
}

// count reads dev's counter; mounted, when not nil, lists the devices
// that can have one, and any other counts 0 unread.
func (t Type) count(root, dev string, mounted map[string]bool) Counted {
	if !t.ErrorCounters {
		return Counted{}
	}
	name, err := sysfs.Name(root, dev)
	if err != nil {
		name = filepath.Base(dev) // not a block device node: as named
	}
	path := filepath.Join(sysfs.RootOr(root), "fs", t.Name, name, "errors_count")
	if mounted != nil && !mounted[name] {
		return Counted{FS: t.Name, Path: path}
	}
	n, err := sysfs.Count(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Counted{FS: t.Name, Path: path}
	}
	if err != nil {
		return Counted{FS: t.Name, Path: path, Err: fmt.Errorf("%s error count of %s: %w", t.Name, dev, err)}
	}
	return Counted{N: n, FS: t.Name, Path: path}
}

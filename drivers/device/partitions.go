package device

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/volumed/volumed/internal/sysfs"
)

// Partition is a partition the kernel has on a disk.
type Partition struct {
	Number      int
	Name        string // sysfs name, e.g. sda1
	Node        string // name under /dev, e.g. sda1
	Start, Size int64  // bytes (sysfs counts 512-byte sectors whatever the disk's block size)
}

// Partitions lists the partitions the kernel has on the whole disk whose
// sysfs directory is dir, by number.
func Partitions(dir string) ([]Partition, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := []Partition{}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		num, err1 := sysfs.Count(sub, "partition")
		start, err2 := sysfs.Count(sub, "start")
		size, err3 := sysfs.Size(sub)
		err := errors.Join(err1, err2, err3)
		if errors.Is(err, fs.ErrNotExist) {
			continue // not a partition, or one removed while being read
		}
		if err != nil {
			return nil, err
		}
		out = append(out, Partition{Number: int(num), Name: e.Name(), Node: NodeName(sub), Start: start * sysfs.SectorSize, Size: size})
	}
	slices.SortFunc(out, func(a, b Partition) int { return a.Number - b.Number })
	return out, nil
}

package sysfs_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/partition"
	"github.com/volumed/volumed/internal/sysfs"
	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

func TestMain(m *testing.M) { testns.Main(m) }

// On the real kernel: a loop device's sysfs directory, found from its
// node, gives the node's numbers, the image's size and, once the disk
// has a partition, that partition.
func TestLoopDeviceOnTheKernel(t *testing.T) {
	testtool.Need(t, "util-linux", "losetup")
	img := testtool.Image(t, 48<<20)
	dev := testtool.Losetup(t, img, "-P")
	// The kernel is told of the partition (BLKPG), as volumed tells it.
	if _, err := partition.Apply(context.Background(), dev, []partition.Want{{Label: "data", Size: 8 << 20}}); err != nil {
		t.Fatal(err)
	}
	dir, err := sysfs.BlockDir("", dev)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	if ma, mi, err := sysfs.DevNumber(dir); err != nil || ma != unix.Major(st.Rdev) || mi != unix.Minor(st.Rdev) {
		t.Errorf("DevNumber = %d:%d, %v; the node is %d:%d", ma, mi, err, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if size, err := sysfs.Size(dir); err != nil || size != 48<<20 {
		t.Errorf("Size = %d, %v; want %d", size, err, 48<<20)
	}
	parts, err := sysfs.Partitions(dir)
	if want := filepath.Base(dev) + "p1"; err != nil || !slices.Equal(parts, []string{want}) {
		t.Fatalf("Partitions = %q, %v; want [%s]", parts, err, want)
	}
	if !sysfs.IsPartition(filepath.Join(dir, parts[0])) {
		t.Errorf("%s is not a partition to IsPartition", parts[0])
	}
	if hs, err := sysfs.Holders(dir); err != nil || len(hs) != 0 {
		t.Errorf("Holders of a fresh loop device = %q, %v", hs, err)
	}
	if name, err := sysfs.Name("", dev); err != nil || name != filepath.Base(dev) {
		t.Errorf("Name(%s) = %q, %v", dev, name, err)
	}
	if ro, err := sysfs.Attr(dir, "ro"); err != nil || ro != "0" {
		t.Errorf("ro = %q, %v", ro, err)
	}
	if _, err := sysfs.BlockDir("", img); err == nil || !strings.Contains(err.Error(), "not a block device") {
		t.Errorf("BlockDir of a regular file: %v", err)
	}
}

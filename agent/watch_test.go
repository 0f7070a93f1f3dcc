package agent

import "testing"

func TestPartitionOf(t *testing.T) {
	for _, c := range []struct {
		part, disk string
		want       bool
	}{
		{"vdc1", "vdc", true},
		{"sdb12", "sdb", true},
		{"nvme0n1p2", "nvme0n1", true},
		{"mmcblk0p1", "mmcblk0", true},
		{"vdc", "vdc", false},          // the disk itself
		{"sdaa1", "sda", false},        // another disk's partition
		{"nvme0n11", "nvme0n1", false}, // no "p" after a digit
		{"nvme0n1p", "nvme0n1", false},
		{"loop0p1", "", false},
	} {
		if got := partitionOf(c.part, c.disk); got != c.want {
			t.Errorf("partitionOf(%q, %q) = %v, want %v", c.part, c.disk, got, c.want)
		}
	}
}

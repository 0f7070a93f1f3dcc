package device

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The kernel's partitions of a disk, in bytes and by number; the disk's
// other sysfs directories (queue, holders, ...) are not partitions.
func TestPartitions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nvme0n1")
	put := func(rel, v string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("queue/logical_block_size", "4096")
	put("nvme0n1p10/partition", "10")
	put("nvme0n1p10/start", "4096")
	put("nvme0n1p10/size", "8")
	put("nvme0n1p2/partition", "2")
	put("nvme0n1p2/start", "2048")
	put("nvme0n1p2/size", "2048")
	put("nvme0n1p3/partition", "3") // removed while being read: its start and size are gone
	got, err := Partitions(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Partition{
		{Number: 2, Name: "nvme0n1p2", Node: "nvme0n1p2", Start: 2048 * 512, Size: 2048 * 512},
		{Number: 10, Name: "nvme0n1p10", Node: "nvme0n1p10", Start: 4096 * 512, Size: 8 * 512},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Partitions = %+v, want %+v", got, want)
	}

	put("nvme0n1p2/size", "lots")
	if _, err := Partitions(dir); err == nil || !strings.Contains(err.Error(), `nvme0n1p2/size: "lots" is not a count`) {
		t.Errorf("a bad size: %v", err)
	}
}

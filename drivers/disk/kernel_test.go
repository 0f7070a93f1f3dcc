package disk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/drivers/partition"
	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

func TestMain(m *testing.M) { testns.Main(m) }

// A loop device that scans partitions is a disk to the selector, with
// the facts the real sysfs and its sectors give.
func TestListRealLoopDisk(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	dev := testtool.Losetup(t, img, "-P")
	find := func() Facts {
		t.Helper()
		disks, err := Lister{}.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(disks, func(d Facts) bool { return d.Path == dev })
		if i < 0 {
			t.Fatalf("%s is not listed", dev)
		}
		return disks[i]
	}
	d := find()
	if d.Transport != "loop" || d.Size != 64<<20 || !d.Blank || len(d.Signatures) != 0 || len(d.Partitions) != 0 || d.ProbeError != "" {
		t.Fatalf("blank loop disk: %+v", d)
	}
	s, err := Compile(fmt.Sprintf(`disk.path == %q && disk.blank && disk.size >= 64 * MiB`, dev))
	if err != nil {
		t.Fatal(err)
	}
	if sel := s.Select([]Facts{d}); sel.Chosen == nil {
		t.Fatalf("selector did not pick the blank disk: %s", sel.Why)
	}

	if _, err := partition.Apply(context.Background(), dev, []partition.Want{{Label: "data", Size: 8 << 20}}); err != nil {
		t.Fatal(err)
	}
	d = find()
	if d.Blank || !slices.Contains(d.Signatures, "gpt") || len(d.Partitions) != 1 {
		t.Fatalf("partitioned loop disk: %+v", d)
	}
	p := d.Partitions[0]
	if p.Number != 1 || p.Path != dev+"p1" || p.Label != "data" || p.Start != 1<<20 || p.Size != 8<<20 || len(p.UUID) != 36 {
		t.Errorf("partition %+v", p)
	}
	if sel := s.Select([]Facts{d}); sel.Chosen != nil || !strings.Contains(sel.Why, "false: disk.blank (disk.blank is false)") {
		t.Errorf("selector on the partitioned disk: %s", sel.Why)
	}
}

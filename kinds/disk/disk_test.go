package disk

import (
	"context"
	"strings"
	"testing"

	diskdrv "github.com/volumed/volumed/drivers/disk"
)

// The fixture host of drivers/disk: SATA, NVMe, virtio, SCSI and loop
// disks, and block devices that are never disks.
const sys = "../../drivers/disk/testdata/sys"

func resolver() Resolver {
	blank := func(context.Context, string, int64, int) (diskdrv.Look, error) { return diskdrv.Look{}, nil }
	return Resolver{
		Lister: diskdrv.Lister{SysRoot: sys, DevRoot: "/dev", Look: blank},
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	rv := resolver()

	// Several match: the first by path, remembered by its WWN (finding
	// it again by that is drivers/device's, tested there).
	d, ok, why, err := rv.Resolve(ctx, Ref{Match: `disk.transport in ["sata", "nvme"]`})
	if err != nil || !ok || d.Path != "/dev/nvme0n1" || !strings.Contains(why, "is the first by path") {
		t.Fatalf("several match: %+v %v %q %v", d, ok, why, err)
	}
	if !strings.Contains(d.Note, "is the first by path") {
		t.Errorf("note %q: want why this disk among several", d.Note)
	}
	if !strings.HasPrefix(d.Identity, "device:wwn:") && !strings.HasPrefix(d.Identity, "device:serial:") {
		t.Errorf("identity %q: want the disk's WWN or serial, never its path", d.Identity)
	}
	if d, _, _, _ := rv.Resolve(ctx, Ref{Match: `disk.path == "/dev/sda"`}); d.Path != "/dev/sda" || d.Note != "" {
		t.Errorf("one matches: %+v, want /dev/sda with no note", d)
	}

	// None matches: not found, and why for each disk.
	_, ok, why, err = rv.Resolve(ctx, Ref{Match: `disk.size > 1000 * TiB`})
	if err != nil || ok || !strings.Contains(why, "no disk matches") || !strings.Contains(why, "/dev/sda: ") {
		t.Errorf("none matches: %v %q %v", ok, why, err)
	}

}

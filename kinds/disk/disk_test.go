package disk

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent"
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

// A wait for a disk states what could bring it: for an expression any
// disk (or a holder going); for a serial, WWN or a node the kernel
// names, that disk's keys; for a link udev makes later, nothing (any
// device's event may be the one it will name).
func TestRefWaiting(t *testing.T) {
	why := errors.New("waiting for the disk")
	for _, c := range []struct {
		ref  Ref
		want *agent.Awaited // nil: unstated
	}{
		{Ref{Match: `disk.serial == "S1"`}, &agent.Awaited{AnyDisk: true, Release: true}},
		{Ref{Serial: "S 1"}, &agent.Awaited{Keys: []string{"device:serial:S_1"}}},
		{Ref{WWN: "naa.5000c500a1b2c3d4"}, &agent.Awaited{Keys: []string{"device:wwn:naa.5000c500a1b2c3d4", "device:wwn:0x5000c500a1b2c3d4"}}},
		{Ref{Path: "/dev/sdb"}, &agent.Awaited{Keys: []string{"device:path:/dev/sdb"}}},
		{Ref{Path: "/dev/mapper/vg0-data"}, &agent.Awaited{Keys: []string{"device:path:/dev/mapper/vg0-data"}}},
		{Ref{Path: "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4"}, nil},
	} {
		err := c.ref.Waiting(why)
		if !errors.Is(err, why) {
			t.Errorf("%+v: %v does not keep the wait's words", c.ref, err)
		}
		var w *agent.Waiting
		switch stated := errors.As(err, &w); {
		case c.want == nil && stated:
			t.Errorf("%+v: states %+v, want nothing stated", c.ref, w.For)
		case c.want != nil && (!stated || !reflect.DeepEqual(w.For, *c.want)):
			t.Errorf("%+v: states %v, want %+v", c.ref, err, *c.want)
		}
	}
}

package lvm

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/store"
)

// A raid1 LV in a VG of one PV waits for a second, creating nothing;
// with two it is made raid1, one mirror, tagged.
func TestAttachRaid1WaitsForItsLegs(t *testing.T) {
	f := newFakeVG(t)
	m := desired("m", Source{VolumeGroup: "vg0", Size: "64Mi", Type: lvmdrv.Raid1})
	_, err := f.attacher().Attach(context.Background(), m)
	if err == nil || !strings.Contains(err.Error(), "volume m: volume group vg0 has 1 physical volume(s) found, LV vg0/m needs 2") || slices.Contains(f.calls, "lvcreate") {
		t.Fatalf("Attach of raid1 on one PV = %v after %q, want a wait naming the VG and the legs, nothing created", err, f.calls)
	}
	f.pvs = 2
	got, err := f.attacher().Attach(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if lv := f.lvs[0]; !got.Created || lv.Segtype != lvmdrv.Raid1 || lvmdrv.Owner(lv) != "m" {
		t.Errorf("Attach = %+v, LV %+v: want a raid1 LV tagged volumed:m, created", got, lv)
	}
}

// A striped LV's size is rounded to a whole extent on each stripe, as
// lvm2 makes it: 10 MiB over 3 stripes of 4 MiB extents is 12 MiB, so
// the growth check sees no shrink asked for.
func TestRoundedStriped(t *testing.T) {
	f := newFakeVG(t)
	f.pvs = 3
	got, err := f.attacher().Rounded(context.Background(), desired("s", Source{VolumeGroup: "vg0", Size: "10Mi", Type: lvmdrv.Striped, Stripes: 3}), store.Attachment{})
	if err != nil || got != 12<<20 {
		t.Errorf("Rounded = %d, %v, want %d", got, err, 12<<20)
	}
}

// An LV of the volume lvm2 will not activate: the core is told so
// (agent.NotActivated, the reason and lvm2's words), nothing is created.
func TestAttachNotActivated(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Size: 64 << 20, Major: -1, Minor: -1})
	f.refuse = map[string]string{"lvchange": "  Refusing activation of partial LV vg0/data.  Use '--activationmode partial' to override.\n"}
	_, err := f.attacher().Attach(context.Background(), data)
	var na *agent.NotActivated
	if !errors.As(err, &na) || na.Reason != lvmdrv.ReasonPVMissing || !strings.Contains(err.Error(), "volume data: activate LV vg0/data") ||
		!strings.Contains(err.Error(), "Refusing activation of partial LV") || slices.Contains(f.calls, "lvcreate") {
		t.Errorf("Attach = %v after %q, want agent.NotActivated (PhysicalVolumeMissing) with lvm2's words, no lvcreate", err, f.calls)
	}
}

// An LV sized by extents is made with them, and never resized after:
// the growth check has no size to keep it at.
func TestExtentsMadeOnceNeverResized(t *testing.T) {
	f := newFakeVG(t)
	d := desired("e", Source{VolumeGroup: "vg0", Extents: "100%FREE"})
	if _, err := f.attacher().Attach(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	rec := store.Attachment{Kind: Name, Identity: "lvm:vg0/new-e", Owned: true}
	if err := f.attacher().Grow(context.Background(), d, rec); err != nil || slices.Contains(f.calls, "lvextend") {
		t.Errorf("Grow of an LV sized by extents = %v after %q, want nothing done", err, f.calls)
	}
}

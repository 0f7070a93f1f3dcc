package lvm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/internal/readonce"
	"github.com/volumed/volumed/store"
)

// A start asks lvm2 the same questions many times over: the core's list
// of what volumed owns (ListOwned), the leftovers it logs, the probe of
// a volume with no record (Find, with its note on an adopted VG), the
// check of a recorded one (Verify) and the health check (Health). In
// the window the core opens for a start (internal/readonce) they cost
// one lvs and one vgs, whatever their number; without one, each runs
// its own (9 here; TestLVMGroup's crash chain counted 6 to 15 a start).
func TestAStartRunsOneReportOfEach(t *testing.T) {
	f := newFakeVG(t,
		lvmdrv.LV{VG: "vg0", Name: "data", UUID: "d1", Tags: []string{lvmdrv.Tag("data")}, Active: true},
		lvmdrv.LV{VG: "vg0", Name: "old", UUID: "o1", Tags: []string{lvmdrv.Tag("old")}})
	f.vgTags = lvmdrv.GroupTag("vg0")
	uuid := filepath.Join(f.sys, "block", "dm-0", "dm", "uuid")
	if err := os.MkdirAll(filepath.Dir(uuid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(uuid, []byte("LVM-vgud1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := desired("data", Source{VolumeGroup: "vg0", Size: "64Mi", CreateVolumeGroup: &CreateGroup{Disks: "disk.blank"}})
	at := store.Attachment{Kind: Name, Device: "/dev/dm-0", Identity: "lvm:vg0/d1", Owned: true}
	start := func(ctx context.Context) {
		t.Helper()
		a := f.attacher()
		owned, err := a.ListOwned(ctx)
		if err != nil || len(owned) != 1 {
			t.Fatalf("ListOwned = %+v, %v", owned, err)
		}
		if left, err := a.ListLeftovers(ctx, nil); err != nil || len(left) != 2 {
			t.Fatalf("ListLeftovers = %q, %v: want vg0/old and vg0", left, err)
		}
		if found, err := a.Find(ctx, d); err != nil || len(found) != 1 {
			t.Fatalf("Find = %+v, %v", found, err)
		}
		if _, ok, err := a.Verify(ctx, at); err != nil || !ok {
			t.Fatalf("Verify = %v, %v", ok, err)
		}
		if h, err := a.Health(ctx, d, at); err != nil || h.Detail == "" {
			t.Fatalf("Health = %+v, %v", h, err)
		}
	}
	start(context.Background())
	alone := len(f.calls)
	f.calls = nil
	start(readonce.Open(context.Background()))
	if !slices.Equal(f.calls, []string{"lvs", "vgs"}) {
		t.Errorf("a start in one window ran %q, want one lvs and one vgs (%d without the window)", f.calls, alone)
	}
}

// An operation's window is dropped by its own write: the attach that
// creates the LV reads the VG again after lvcreate, and finds it.
func TestAWriteDropsTheWindow(t *testing.T) {
	f := newFakeVG(t)
	ctx := readonce.Open(context.Background())
	got, err := f.attacher().Attach(ctx, data)
	if err != nil || got.Identity != "lvm:vg0/new-data" {
		t.Fatalf("Attach = %+v, %v: want the LV it made", got, err)
	}
	// vgs and lvs before lvcreate (the room check asks vgs again: shared),
	// and both again after it.
	if want := []string{"vgs", "lvs", "lvcreate", "vgs", "lvs"}; !slices.Equal(f.calls, want) {
		t.Errorf("Attach ran %q, want %q", f.calls, want)
	}
}

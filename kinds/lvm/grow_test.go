package lvm

import (
	"context"
	"slices"
	"strings"
	"testing"

	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/store"
)

// A larger size extends the volume's LV (rounded up to the VG's 4 MiB
// extents); the same size again runs no lvextend.
func TestGrowExtends(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Size: 64 << 20, Active: true})
	a := f.attacher()
	rec := store.Attachment{Kind: Name, Identity: "lvm:vg0/u1", Owned: true}
	d := desired("data", Source{VolumeGroup: "vg0", Size: "126Mi"})
	ctx := context.Background()
	if n, err := a.Rounded(ctx, d, rec); err != nil || n != 128<<20 {
		t.Fatalf("Rounded(126Mi) = %d, %v, want 128 MiB (whole 4 MiB extents)", n, err)
	}
	if err := a.Grow(ctx, d, rec); err != nil {
		t.Fatal(err)
	}
	if f.lvs[0].Size != 128<<20 {
		t.Errorf("LV after the grow: %d bytes, want 128 MiB", f.lvs[0].Size)
	}
	f.calls = nil
	if err := a.Grow(ctx, d, rec); err != nil || slices.Contains(f.calls, "lvextend") {
		t.Errorf("a second Grow = %v after %q, want nothing extended", err, f.calls)
	}
}

// An LV volumed did not create is never extended; a smaller size is
// refused naming the volume and both sizes.
func TestGrowRefuses(t *testing.T) {
	ctx := context.Background()
	foreign := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "shared", UUID: "s", Size: 16 << 20, Active: true})
	err := foreign.attacher().Grow(ctx, desired("ext", Source{VolumeGroup: "vg0", Name: "shared", Size: "32Mi"}), store.Attachment{Kind: Name, Identity: "lvm:vg0/s"})
	if err == nil || !strings.Contains(err.Error(), "volume ext") || !strings.Contains(err.Error(), "never resizes an LV it did not create") || slices.Contains(foreign.calls, "lvextend") {
		t.Errorf("Grow of a foreign LV = %v after %q, want a refusal and no lvextend", err, foreign.calls)
	}
	ours := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Size: 64 << 20, Active: true})
	err = ours.attacher().Grow(ctx, desired("data", Source{VolumeGroup: "vg0", Size: "32Mi"}), store.Attachment{Kind: Name, Identity: "lvm:vg0/u1", Owned: true})
	if err == nil || !strings.Contains(err.Error(), "volume data") || !strings.Contains(err.Error(), "67108864 bytes, the manifest asks for 33554432") || slices.Contains(ours.calls, "lvextend") {
		t.Errorf("Grow to a smaller size = %v after %q, want a refusal naming both sizes", err, ours.calls)
	}
}

// Joinable asks nothing of the host for a volume whose VG does not take
// new disks in: one volumed does not keep, or keeps without grow: true.
func TestJoinableOnlyWithGrow(t *testing.T) {
	f := newFakeVG(t)
	at := store.Attachment{Kind: Name, Identity: "lvm:vg0/u1"}
	for _, s := range []Source{
		{VolumeGroup: "vg0", Size: "16Mi"},
		{VolumeGroup: "vg0", Size: "16Mi", CreateVolumeGroup: &CreateGroup{Disks: "disk.blank"}},
	} {
		if got, err := f.attacher().Joinable(context.Background(), desired("data", s), at); got || err != nil || len(f.calls) != 0 {
			t.Errorf("Joinable(%+v) = %v, %v after %q, want false and no command", s, got, err, f.calls)
		}
	}
}

// An LV that follows its VG (grow) is made of the VG's free extents and
// takes those the VG gains: Joinable says so (the core's growth check),
// Grow extends it by them, once; an LV volumed did not make is never
// extended, whatever the VG has free.
func TestGrowFollowsTheVG(t *testing.T) {
	ctx := context.Background()
	d := desired("f", Source{VolumeGroup: "vg0", Grow: true})
	if w, err := want(d); err != nil || !w.Follow || w.Extents != lvmdrv.FollowExtents {
		t.Fatalf("want(grow) = %+v, %v: want it made of %s, following", w, err, lvmdrv.FollowExtents)
	}
	f := newFakeVG(t)
	if _, err := f.attacher().Attach(ctx, d); err != nil {
		t.Fatal(err)
	}
	f.lvs[0].Size, f.free = 64<<20, "0" // lvcreate took every free extent
	rec := store.Attachment{Kind: Name, Identity: "lvm:vg0/new-f", Owned: true}
	if ok, err := f.attacher().Joinable(ctx, d, rec); ok || err != nil {
		t.Errorf("Joinable with no free extent = %v, %v, want false", ok, err)
	}
	f.free = "33554432" // a disk joined the VG
	if ok, err := f.attacher().Joinable(ctx, d, rec); !ok || err != nil {
		t.Errorf("Joinable with 32 MiB free = %v, %v, want true", ok, err)
	}
	if err := f.attacher().Grow(ctx, d, rec); err != nil || f.lvs[0].Size != 96<<20 {
		t.Errorf("Grow = %v, LV of %d bytes, want 96 MiB", err, f.lvs[0].Size)
	}
	f.free, f.calls = "0", nil
	if err := f.attacher().Grow(ctx, d, rec); err != nil || slices.Contains(f.calls, "lvextend") {
		t.Errorf("Grow with nothing free = %v after %q, want no lvextend", err, f.calls)
	}

	foreign := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "shared", UUID: "s", Size: 16 << 20, Active: true})
	fd := desired("ext", Source{VolumeGroup: "vg0", Name: "shared", Grow: true})
	at := store.Attachment{Kind: Name, Identity: "lvm:vg0/s"}
	ok, err := foreign.attacher().Joinable(ctx, fd, at)
	if err == nil {
		err = foreign.attacher().Grow(ctx, fd, at)
	}
	if ok || err != nil || slices.Contains(foreign.calls, "lvextend") {
		t.Errorf("a foreign LV with grow: Joinable %v, %v after %q, want false and no lvextend", ok, err, foreign.calls)
	}
}

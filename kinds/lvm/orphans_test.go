package lvm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// The core's start-up lists what carries volumed's tag (agent.OrphanLister):
// every active LV tagged volumed:<volume>, whatever its VG or name, as
// Verify would find it; not an LV volumed did not make, not an inactive
// one (not attached), not a thin pool (no volume's), not an LV with two
// volumed tags (no one's). Listing runs nothing but a report.
func TestListOwned(t *testing.T) {
	f := newFakeVG(t,
		lvmdrv.LV{VG: "vg0", Name: "gone", UUID: "g1", Tags: []string{"volumed:gone"}, Active: true},
		lvmdrv.LV{VG: "vg0", Name: "root", UUID: "r1", Active: true},
		lvmdrv.LV{VG: "vg0", Name: "asleep", UUID: "a1", Tags: []string{"volumed:asleep"}},
		lvmdrv.LV{VG: "vg0", Name: "pool", UUID: "p1", Tags: []string{"volumed-pool:pool"}, Active: true},
		lvmdrv.LV{VG: "vg0", Name: "two", UUID: "t1", Tags: []string{"volumed:a", "volumed:b"}, Active: true},
	)
	if _, ok := (Kind{}).Attacher(kind.Env{}).(agent.OrphanLister); !ok {
		t.Fatal("the lvm attacher lists nothing at start-up: an LV a crash left for a volume no manifest wants is never seen")
	}
	// No LV active in the kernel (no dm device of lvm2's): no lvm2 scan.
	if got, err := f.attacher().ListOwned(context.Background()); err != nil || len(got) != 0 || len(f.calls) != 0 {
		t.Fatalf("ListOwned with no dm device = %+v, %v after %q, want nothing and no command", got, err, f.calls)
	}
	dir := filepath.Join(f.sys, "block", "dm-0", "dm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uuid"), []byte("LVM-vgug1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := f.attacher().ListOwned(context.Background())
	want := []store.Attachment{{Kind: Name, Device: "/dev/dm-0", Identity: "lvm:vg0/g1", Owned: true}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ListOwned = %+v, %v, want %+v", got, err, want)
	}
	if !slices.Equal(f.calls, []string{"lvs"}) {
		t.Errorf("ListOwned ran %q, want one lvs", f.calls)
	}
	// What it lists is what Verify finds: a recorded LV listed is
	// verified by the list.
	if dev, ok, err := f.attacher().Verify(context.Background(), got[0]); err != nil || !ok || dev != got[0].Device {
		t.Errorf("Verify of the listed LV = %q, %v, %v", dev, ok, err)
	}
}

// ListLeftovers lists an inactive LV of volumed's whose volume no
// manifest names and the VG volumed made that none names, and runs no
// lvm2 command on a host with no LV active and no LVM2 label.
func TestListLeftovers(t *testing.T) {
	ctx := context.Background()
	f := newFakeVG(t,
		lvmdrv.LV{VG: "vg0", Name: "old", UUID: "u-old", Tags: []string{lvmdrv.Tag("old")}, Size: 16 << 20},
		lvmdrv.LV{VG: "vg0", Name: "kept", UUID: "u-kept", Tags: []string{lvmdrv.Tag("kept")}, Size: 16 << 20})
	f.vgTags = lvmdrv.GroupTag("vg0")
	if got, err := f.attacher().ListLeftovers(ctx, nil); got != nil || err != nil || len(f.calls) != 0 {
		t.Fatalf("ListLeftovers with nothing of LVM in sysfs = %q, %v after %q, want nothing run", got, err, f.calls)
	}
	uuid := filepath.Join(f.sys, "block", "dm-9", "dm", "uuid")
	if err := os.MkdirAll(filepath.Dir(uuid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(uuid, []byte("LVM-someothervg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := f.attacher().ListLeftovers(ctx, []*agent.Desired{desired("kept", Source{VolumeGroup: "vgelse", Size: "16Mi"})})
	if err != nil || len(got) != 2 || !strings.Contains(got[0], "inactive LV vg0/old") || !strings.Contains(got[1], "volume group vg0") {
		t.Errorf("ListLeftovers = %q, %v, want the LV vg0/old and the VG vg0", got, err)
	}
	got, err = f.attacher().ListLeftovers(ctx, []*agent.Desired{desired("kept", Source{VolumeGroup: "vg0", Size: "16Mi"})})
	if err != nil || len(got) != 1 || !strings.Contains(got[0], "vg0/old") {
		t.Errorf("ListLeftovers with vg0 named = %q, %v, want only the LV vg0/old", got, err)
	}
	if slices.ContainsFunc(f.calls, func(c string) bool { return c != "vgs" && c != "lvs" }) {
		t.Errorf("ListLeftovers ran %q, want only reports", f.calls)
	}
}

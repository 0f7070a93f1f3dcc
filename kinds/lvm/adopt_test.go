package lvm

import (
	"context"
	"slices"
	"strings"
	"testing"

	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/store"
)

// A volume whose VG volumed was to make, found in a VG volumed did not
// make (no tag) with its LV active: Find says it is adopted read-only
// (the note TestLVMGroup's first run lacked: no attach ran), and the
// LV is used, nothing run but reports.
func TestFindNotesAnAdoptedGroup(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "fl", UUID: "fl-uuid", Active: true})
	d := desired("adopt", Source{VolumeGroup: "vg0", Name: "fl", Size: "16Mi", CreateVolumeGroup: &CreateGroup{Disks: "disk.blank"}})
	got, err := f.attacher().Find(context.Background(), d)
	if err != nil || len(got) != 1 || !strings.Contains(got[0].Note, "adopted read-only") || got[0].Owned {
		t.Fatalf("Find = %+v, %v: want the foreign LV, noted as in an adopted VG", got, err)
	}
	for _, c := range f.calls {
		if c != "vgs" && c != "lvs" {
			t.Errorf("Find ran %s", c)
		}
	}
	// Without createVolumeGroup the VG is the operator's: no note.
	if got, err := f.attacher().Find(context.Background(), desired("adopt", Source{VolumeGroup: "vg0", Name: "fl", Size: "16Mi"})); err != nil || got[0].Note != "" {
		t.Errorf("Find without createVolumeGroup = %+v, %v", got, err)
	}
}

// validate asks for dm-thin-pool when the VG volumed makes has a pool.
func TestNeedsPools(t *testing.T) {
	n := Kind{}.Needs(&Source{CreateVolumeGroup: &CreateGroup{ThinPools: []ThinPool{{Name: "p", Size: "1Gi"}}}})
	if !slices.ContainsFunc(n.Modules, func(m hostcheck.Module) bool { return m.Name == "dm-thin-pool" }) {
		t.Errorf("Needs = %+v: want dm-thin-pool", n)
	}
}

// After a restart that found the volume's record and LV in place (no
// attach, so no note), the status still says the VG is adopted
// read-only: the health check's detail says it, and only for a volume
// that asked volumed to keep the VG.
func TestHealthSaysAdoptedAfterRestart(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "fl", UUID: "fl-uuid", Active: true})
	at := store.Attachment{Kind: Name, Identity: "lvm:vg0/fl-uuid"}
	d := desired("adopt", Source{VolumeGroup: "vg0", Name: "fl", Size: "16Mi", CreateVolumeGroup: &CreateGroup{Disks: "disk.blank"}})
	h, err := f.attacher().Health(context.Background(), d, at)
	if err != nil || !strings.Contains(h.Detail, "adopted read-only") || h.Problem != nil {
		t.Fatalf("Health = %+v, %v: want the detail to say the VG is adopted read-only", h, err)
	}
	plain := desired("adopt", Source{VolumeGroup: "vg0", Name: "fl", Size: "16Mi"})
	if h, err := f.attacher().Health(context.Background(), plain, at); err != nil || strings.Contains(h.Detail, "adopted") {
		t.Errorf("Health without createVolumeGroup = %+v, %v: the VG is the operator's, nothing to say", h, err)
	}
	for _, c := range f.calls {
		if c != "vgs" && c != "lvs" {
			t.Errorf("Health ran %s", c)
		}
	}
}

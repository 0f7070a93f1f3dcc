package lvm

import (
	"context"
	"slices"
	"strings"
	"testing"

	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/internal/hostcheck"
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

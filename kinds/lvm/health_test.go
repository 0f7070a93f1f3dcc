package lvm

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/store"
)

// A thin LV's health: its VG's and pool's gauges under TopoLVM's names,
// the detail for the status, and ThinPoolFull once the pool's data
// passes 90%; a missing PV says so first.
func TestHealthThin(t *testing.T) {
	pool := lvmdrv.LV{VG: "vg0", Name: "pool", UUID: "p", Segtype: "thin-pool", Size: 512 << 20, Active: true, Data: 42.5, Metadata: 10.25}
	thin := lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Segtype: "thin", Pool: "pool", Tags: []string{"volumed:data"}, Size: 1 << 30, Active: true}
	f := newFakeVG(t, pool, thin)
	a := f.attacher()
	at := store.Attachment{Kind: Name, Identity: "lvm:vg0/u1", Owned: true}
	ctx := context.Background()
	h, err := a.Health(ctx, data, at)
	if err != nil || h.Problem != nil {
		t.Fatalf("Health = %+v, %v: want no problem at 42.5%%", h, err)
	}
	if h.Detail != "LV vg0/data in VG vg0, thin in pool vg0/pool" {
		t.Errorf("Detail = %q", h.Detail)
	}
	want := map[string]float64{
		"volumed_lvm_volumegroup_size_bytes{volume_group=vg0}":                   1 << 30,
		"volumed_lvm_volumegroup_available_bytes{volume_group=vg0}":              1 << 30,
		"volumed_lvm_volumegroup_missing_physical_volumes{volume_group=vg0}":     0,
		"volumed_lvm_thinpool_size_bytes{volume_group=vg0,thin_pool=pool}":       512 << 20,
		"volumed_lvm_thinpool_data_percent{volume_group=vg0,thin_pool=pool}":     42.5,
		"volumed_lvm_thinpool_metadata_percent{volume_group=vg0,thin_pool=pool}": 10.25,
	}
	got := map[string]float64{}
	for _, g := range h.Gauges {
		var ls []string
		for _, l := range g.Labels {
			ls = append(ls, l[0]+"="+l[1])
		}
		got[g.Name+"{"+strings.Join(ls, ",")+"}"] = g.Value
	}
	for k, v := range want {
		if gv, ok := got[k]; !ok || gv != v {
			t.Errorf("gauge %s = %v (%v), want %v; all: %v", k, gv, ok, v, got)
		}
	}

	f.lvs[0].Data = 91
	h, err = a.Health(ctx, data, at)
	if err != nil || h.Problem == nil || h.Problem.Reason != "ThinPoolFull" || !strings.Contains(h.Problem.Message, "thin pool vg0/pool is 91.0% full (data)") {
		t.Errorf("Health at 91%% = %+v, %v: want ThinPoolFull naming the pool", h.Problem, err)
	}
	f.missing = 1
	if h, _ = a.Health(ctx, data, at); h.Problem == nil || h.Problem.Reason != "PhysicalVolumeMissing" || !strings.Contains(h.Problem.Message, "missing 1 physical volume") {
		t.Errorf("Health with a PV missing = %+v", h.Problem)
	}
	if slices.ContainsFunc(f.calls, func(c string) bool { return c != "vgs" && c != "lvs" }) {
		t.Errorf("the health check ran %q: want reports only", f.calls)
	}
}

// The health check runs at every resync for each LV: one report (lvs,
// with its VG's fields), not a vgs and an lvs.
func TestHealthRunsOneReport(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Size: 64 << 20, Active: true})
	f.missing, f.pvs = 1, 2
	h, err := f.attacher().Health(context.Background(), data, store.Attachment{Kind: Name, Identity: "lvm:vg0/u1"})
	if err != nil || h.Problem == nil || h.Problem.Reason != "PhysicalVolumeMissing" {
		t.Errorf("Health with a PV missing = %+v, %v: want PhysicalVolumeMissing, from the lvs report's VG fields", h, err)
	}
	if !slices.Equal(f.calls, []string{"lvs"}) {
		t.Errorf("the health check ran %q, want one lvs", f.calls)
	}
}

// A linear LV has the VG's gauges and no pool's.
func TestHealthLinear(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Size: 64 << 20, Active: true})
	h, err := f.attacher().Health(context.Background(), data, store.Attachment{Kind: Name, Identity: "lvm:vg0/u1"})
	if err != nil || h.Problem != nil || len(h.Gauges) != 3 || slices.ContainsFunc(h.Gauges, func(g agent.Gauge) bool { return strings.Contains(g.Name, "thinpool") }) {
		t.Errorf("Health of a linear LV = %+v, %v: want the VG's three gauges, no problem", h, err)
	}
}

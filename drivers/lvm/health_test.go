package lvm

import (
	"strings"
	"testing"
)

func TestHealth(t *testing.T) {
	lv := LV{VG: "vg0", Name: "data", Segtype: "thin", Pool: "pool"}
	vg := VG{Name: "vg0"}
	pool := func(data, meta float64) *LV {
		return &LV{VG: "vg0", Name: "pool", Segtype: "thin-pool", Data: data, Metadata: meta}
	}
	for _, c := range []struct {
		name string
		s    Source
		says []string
	}{
		{"linear, complete VG: nothing", Source{LV: LV{VG: "vg0", Name: "data"}, VG: vg}, nil},
		{"pool below the threshold", Source{LV: lv, VG: vg, Pool: pool(89.9, 10)}, nil},
		{"pool inactive (unknown)", Source{LV: lv, VG: vg, Pool: pool(-1, -1)}, nil},
		{"data at the threshold", Source{LV: lv, VG: vg, Pool: pool(90, 10)}, []string{"thin pool vg0/pool is 90.0% full (data): at 100% writes to LV vg0/data fail"}},
		{"metadata past it", Source{LV: lv, VG: vg, Pool: pool(10, 95.5)}, []string{"95.5% full (metadata)"}},
		{"both, and a PV missing", Source{LV: lv, VG: VG{Name: "vg0", MissingPVs: 1}, Pool: pool(100, 99)},
			[]string{"(data)", "(metadata)", "volume group vg0 is missing 1 physical volume(s)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Health(c.s)
			if len(got) != len(c.says) {
				t.Fatalf("Health = %q, want %d sentences like %q", got, len(c.says), c.says)
			}
			for i := range got {
				if !strings.Contains(got[i], c.says[i]) {
					t.Errorf("Health[%d] = %q, want it to say %q", i, got[i], c.says[i])
				}
			}
		})
	}
}

func TestDetail(t *testing.T) {
	s := Source{LV: LV{VG: "vg0", Name: "data", Segtype: "thin", Pool: "pool"}, VG: VG{Name: "vg0"}, Pool: &LV{VG: "vg0", Name: "pool"}}
	if got := Detail(s); got != "LV vg0/data in VG vg0, thin in pool vg0/pool" {
		t.Errorf("Detail = %q", got)
	}
}

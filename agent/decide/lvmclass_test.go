package decide

import (
	"strings"
	"testing"
)

func TestLVMParams(t *testing.T) {
	vgs := []string{"vg0", "vgdata"}
	for _, c := range []struct {
		name   string
		params map[string]string
		want   LVMClass
		err    string
	}{
		{"linear by default", map[string]string{"volumeGroup": "vg0"}, LVMClass{VG: "vg0", Type: "linear", Ratio: 1}, ""},
		{"thin in a pool", map[string]string{"volumeGroup": "vgdata", "type": "thin", "thinPool": "pool0"}, LVMClass{VG: "vgdata", Type: "thin", Pool: "pool0", Ratio: 1}, ""},
		{"thin overprovisioned", map[string]string{"volumeGroup": "vg0", "type": "thin", "thinPool": "p", "overprovisionRatio": "2.5"}, LVMClass{VG: "vg0", Type: "thin", Pool: "p", Ratio: 2.5}, ""},
		{"no VG", map[string]string{"type": "linear"}, LVMClass{}, "parameters.volumeGroup: required"},
		{"a VG the host did not give", map[string]string{"volumeGroup": "root"}, LVMClass{}, `parameters.volumeGroup: "root" is not one of the volume groups this node serves`},
		{"unknown type", map[string]string{"volumeGroup": "vg0", "type": "raid1"}, LVMClass{}, `parameters.type: "raid1": must be linear or thin`},
		{"thin without a pool", map[string]string{"volumeGroup": "vg0", "type": "thin"}, LVMClass{}, "parameters.thinPool: required for type thin"},
		{"a pool for linear", map[string]string{"volumeGroup": "vg0", "thinPool": "p"}, LVMClass{}, "parameters.thinPool: only for type thin"},
		{"a ratio for linear", map[string]string{"volumeGroup": "vg0", "overprovisionRatio": "2"}, LVMClass{}, "parameters.overprovisionRatio: only for type thin"},
		{"a ratio under 1", map[string]string{"volumeGroup": "vg0", "type": "thin", "thinPool": "p", "overprovisionRatio": "0.5"}, LVMClass{}, `parameters.overprovisionRatio: "0.5": must be a number of at least 1`},
		{"a ratio that is no number", map[string]string{"volumeGroup": "vg0", "type": "thin", "thinPool": "p", "overprovisionRatio": "lots"}, LVMClass{}, "parameters.overprovisionRatio"},
		{"an infinite ratio", map[string]string{"volumeGroup": "vg0", "type": "thin", "thinPool": "p", "overprovisionRatio": "+Inf"}, LVMClass{}, "parameters.overprovisionRatio"},
	} {
		got, err := LVMParams(c.params, vgs)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one with %q", c.name, err, c.err)
		case c.err == "" && got != c.want:
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestLVMCapacity is the lvm backend's GetCapacity: LVMFree, then the
// one PoolCapacity rule over the records not yet made (or not yet grown
// to their promise).
func TestLVMCapacity(t *testing.T) {
	const mi = 1 << 20
	linear := LVMClass{VG: "vg0", Type: "linear", Ratio: 1}
	thin := LVMClass{VG: "vg0", Type: "thin", Pool: "p", Ratio: 1}
	thin3 := LVMClass{VG: "vg0", Type: "thin", Pool: "p", Ratio: 3}
	for _, c := range []struct {
		name     string
		class    LVMClass
		vgFree   int64
		poolSize int64
		data     float64
		promised []Promise
		want     int64
	}{
		{"linear: the VG's free space", linear, 500 * mi, 0, 0, nil, 500 * mi},
		{"linear: a record not made yet is promised in full", linear, 500 * mi, 0, 0, []Promise{{Size: 100 * mi}}, 400 * mi},
		{"linear: a made LV is in the VG's free space already", linear, 400 * mi, 0, 0, []Promise{{Size: 100 * mi, Allocated: 100 * mi}}, 400 * mi},
		{"linear: an expansion not grown yet is promised", linear, 400 * mi, 0, 0, []Promise{{Size: 150 * mi, Allocated: 100 * mi}}, 350 * mi},
		{"linear: lvm2 rounded the LV up past its promise", linear, 400 * mi, 0, 0, []Promise{{Size: 100 * mi, Allocated: 128 * mi}}, 400 * mi},
		{"thin: the pool's free data, not the VG's", thin, 900 * mi, 200 * mi, 25, nil, 150 * mi},
		{"thin: overprovisioned 3 times", thin3, 0, 200 * mi, 25, nil, 450 * mi},
		{"thin: a record not made yet", thin3, 0, 200 * mi, 25, []Promise{{Size: 100 * mi}}, 350 * mi},
		{"thin: a full pool has nothing, however overprovisioned", thin3, 0, 200 * mi, 100, nil, 0},
		{"thin: an inactive pool (no percent) promises nothing: its use is not known", thin, 0, 200 * mi, -1, nil, 0},
		{"never negative", linear, 10 * mi, 0, 0, []Promise{{Size: 100 * mi}}, 0},
	} {
		if got := PoolCapacity(LVMFree(c.class, c.vgFree, c.poolSize, c.data), 0, c.promised); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

package lvm

import (
	"reflect"
	"strings"
	"testing"
)

func TestPlanPool(t *testing.T) {
	p := PoolWant{VG: "vg0", Name: "pool0", Size: 128 << 20}
	ours := LV{VG: "vg0", Name: "pool0", UUID: "u1", Segtype: "thin-pool", Tags: []string{"volumed-pool:pool0"}}
	renamed := ours
	renamed.Name = "old"
	foreign := LV{VG: "vg0", Name: "pool0", UUID: "u2", Segtype: "thin-pool"}
	linear := LV{VG: "vg0", Name: "pool0", UUID: "u3", Segtype: "linear"}
	half := LV{VG: "vg0", Name: "pool0", UUID: "u4", Segtype: "linear", Tags: []string{"volumed-pool:pool0"}}
	tests := []struct {
		name   string
		lvs    []LV
		action Action
		owned  bool
		why    string
	}{
		{"missing: create", []LV{{VG: "vg0", Name: "data", Segtype: "linear"}}, Create, false, ""},
		{"ours: use", []LV{ours}, Use, true, ""},
		{"ours renamed: found by its tag, not made again", []LV{renamed}, Use, true, ""},
		{"a pool of the name volumed did not make: used", []LV{foreign}, Use, false, ""},
		{"an LV of the name that is no pool: refused", []LV{linear}, Refuse, false, "not a thin pool"},
		{"tagged but no pool: refused", []LV{half}, Refuse, false, "lvcreate cut short"},
		{"two tagged: refused", []LV{ours, renamed}, Refuse, false, "2 LVs"},
	}
	for _, tc := range tests {
		s := PlanPool(p, tc.lvs)
		if s.Action != tc.action || s.Owned != tc.owned || !strings.Contains(s.Why, tc.why) {
			t.Errorf("%s: PlanPool = %+v, want %s owned %v (%q)", tc.name, s, tc.action, tc.owned, tc.why)
		}
	}
	// A pool's tag is never read as a volume's.
	if Owner(ours) != "" {
		t.Errorf("Owner(pool) = %q", Owner(ours))
	}
}

func TestPoolCreateArgs(t *testing.T) {
	devs := []string{"/dev/vdb"}
	got := PoolCreateArgs(devs, PoolWant{VG: "vg0", Name: "pool0", Size: 128 << 20, MetadataSize: 8 << 20})
	want := []string{"lvcreate", "--config", FilterConfig(devs), "--yes", "--type", "thin-pool", "--name", "pool0", "--size", "134217728b",
		"--poolmetadatasize", "8388608b", "--addtag", "volumed-pool:pool0", "vg0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PoolCreateArgs = %q\nwant %q", got, want)
	}
}

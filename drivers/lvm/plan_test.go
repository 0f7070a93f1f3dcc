package lvm

import (
	"strings"
	"testing"
)

func TestOwner(t *testing.T) {
	for _, c := range []struct {
		tags []string
		want string
	}{
		{nil, ""},
		{[]string{"backup"}, ""},
		{[]string{"volumed:data"}, "data"},
		{[]string{"backup", "volumed:data"}, "data"},
		{[]string{"volumed:data", "volumed:logs"}, ""}, // two: no one's
		{[]string{"volumed-data"}, ""},
	} {
		if got := Owner(LV{Tags: c.tags}); got != c.want {
			t.Errorf("Owner(tags %v) = %q, want %q", c.tags, got, c.want)
		}
	}
}

func TestDecide(t *testing.T) {
	w := Want{Volume: "data", VG: "vg0", Name: "data", Size: 1 << 30}
	ours := LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Active: true, Major: 253, Minor: 0}
	oursDown := ours
	oursDown.Active, oursDown.Major, oursDown.Minor = false, -1, -1
	renamed := ours
	renamed.Name = "old-data"
	foreign := LV{VG: "vg0", Name: "data", UUID: "f1", Active: true, Major: 253, Minor: 1}
	foreignDown := foreign
	foreignDown.Active = false
	others := LV{VG: "vg0", Name: "data", UUID: "o1", Tags: []string{"volumed:logs"}, Active: true}
	twoTags := LV{VG: "vg0", Name: "data", UUID: "t1", Tags: []string{"volumed:a", "volumed:b"}, Active: true}
	unrelated := LV{VG: "vg0", Name: "root", UUID: "r1", Active: true}
	second := ours
	second.Name, second.UUID = "data2", "u2"

	tests := []struct {
		name   string
		vg     bool
		lvs    []LV
		action Action
		uuid   string
		owned  bool
		says   string
	}{
		{"no VG: wait, create nothing", false, nil, Wait, "", false, "volume group vg0 is not there"},
		{"empty VG: create", true, nil, Create, "", false, ""},
		{"other LVs only: create", true, []LV{unrelated}, Create, "", false, ""},
		{"ours, active: use", true, []LV{unrelated, ours}, Use, "u1", true, ""},
		{"ours, inactive after a reboot: activate", true, []LV{oursDown}, Activate, "u1", true, ""},
		{"ours renamed: found by the tag", true, []LV{renamed}, Use, "u1", true, ""},
		{"ours renamed, another LV has its name: the tag wins", true, []LV{foreign, renamed}, Use, "u1", true, ""},
		{"two tagged: refuse", true, []LV{ours, second}, Refuse, "", false, "vg0/data, vg0/data2 all carry the tag volumed:data"},
		{"foreign, active: used, not owned", true, []LV{foreign}, Use, "f1", false, ""},
		{"foreign, inactive: wait, never activated", true, []LV{foreignDown}, Wait, "f1", false, "never activates it"},
		{"another volume's: refuse", true, []LV{others}, Refuse, "o1", false, "volume logs's"},
		{"two volumed tags: refuse", true, []LV{twoTags}, Refuse, "t1", false, "more than one volumed tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Decide(w, tt.vg, tt.lvs)
			if s.Action != tt.action || s.LV.UUID != tt.uuid || s.Owned != tt.owned {
				t.Fatalf("Decide = %+v, want %s of %q owned=%v", s, tt.action, tt.uuid, tt.owned)
			}
			if !strings.Contains(s.Why, tt.says) {
				t.Errorf("Why = %q, want it to say %q", s.Why, tt.says)
			}
		})
	}
}

// A thin LV is created only in a thin pool the VG holds; a missing pool
// is waited for, an LV of the pool's name that is no pool refused.
func TestDecideThin(t *testing.T) {
	w := Want{Volume: "data", VG: "vg0", Name: "data", Size: 1 << 30, Type: Thin, ThinPool: "pool"}
	pool := LV{VG: "vg0", Name: "pool", UUID: "p", Segtype: "thin-pool", Active: true}
	notPool := LV{VG: "vg0", Name: "pool", UUID: "p", Segtype: "linear", Active: true}
	for _, c := range []struct {
		name   string
		lvs    []LV
		action Action
		says   string
	}{
		{"pool there: create", []LV{pool}, Create, ""},
		{"no pool: wait", nil, Wait, "thin pool vg0/pool is not there"},
		{"pool's name on a linear LV: refuse", []LV{notPool}, Refuse, "LV vg0/pool is linear, not a thin pool"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Decide(w, true, c.lvs)
			if s.Action != c.action || !strings.Contains(s.Why, c.says) {
				t.Fatalf("Decide = %+v, want %s saying %q", s, c.action, c.says)
			}
		})
	}
}

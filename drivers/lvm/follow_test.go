package lvm

import "testing"

func TestFollowSize(t *testing.T) {
	const mib = 1 << 20
	w := Want{Volume: "data", VG: "vg0", Name: "data", Follow: true}
	ours := LV{Name: "data", VG: "vg0", Tags: []string{Tag("data")}, Size: 100 * mib}
	vg := VG{Name: "vg0", Free: 60 * mib}
	for _, tc := range []struct {
		name string
		w    Want
		lv   LV
		vg   VG
		want int64
	}{
		{"free extents taken", w, ours, vg, 160 * mib},
		{"no free extent", w, ours, VG{Name: "vg0"}, 0},
		{"not following: size decides", Want{Volume: "data", VG: "vg0", Size: 100 * mib}, ours, vg, 0},
		{"another volume's LV", w, LV{Name: "data", VG: "vg0", Tags: []string{Tag("other")}, Size: 100 * mib}, vg, 0},
		{"an LV volumed did not make", w, LV{Name: "data", VG: "vg0", Size: 100 * mib}, vg, 0},
		{"another VG's free extents", w, ours, VG{Name: "vg1", Free: 60 * mib}, 0},
	} {
		if got := FollowSize(tc.w, tc.lv, tc.vg); got != tc.want {
			t.Errorf("%s: FollowSize = %d, want %d", tc.name, got, tc.want)
		}
	}
}

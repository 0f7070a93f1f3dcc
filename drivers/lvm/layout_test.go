package lvm

import (
	"reflect"
	"strings"
	"testing"
)

func TestCreateArgsLayout(t *testing.T) {
	tail := []string{"--name", "data", "--size", "1073741824b", "--addtag", "volumed:data", "--zero", "y", "--wipesignatures", "y", "--activate", "y", "vg0"}
	for _, c := range []struct {
		name string
		w    Want
		head []string
	}{
		{"striped", Want{Type: Striped, Stripes: 2}, []string{"--type", "striped", "--stripes", "2"}},
		{"striped, stripe size", Want{Type: Striped, Stripes: 3, StripeSize: 128 << 10}, []string{"--type", "striped", "--stripes", "3", "--stripesize", "128k"}},
		{"raid1, the default mirror", Want{Type: Raid1}, []string{"--type", "raid1", "--mirrors", "1"}},
		{"raid1, three legs", Want{Type: Raid1, Mirrors: 2}, []string{"--type", "raid1", "--mirrors", "2"}},
		{"linear by default", Want{}, []string{"--type", "linear"}},
	} {
		w := c.w
		w.Volume, w.VG, w.Name, w.Size = "data", "vg0", "data", 1<<30
		want := append(append([]string{"lvcreate", "--yes"}, c.head...), tail...)
		if got := CreateArgs(w); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: CreateArgs = %q, want %q", c.name, got, want)
		}
	}
}

func TestCreateArgsExtents(t *testing.T) {
	got := CreateArgs(Want{Volume: "data", VG: "vg0", Name: "data", Extents: "50%FREE", Type: Raid1})
	want := []string{"lvcreate", "--yes", "--type", "raid1", "--mirrors", "1", "--name", "data", "--extents", "50%FREE",
		"--addtag", "volumed:data", "--zero", "y", "--wipesignatures", "y", "--activate", "y", "vg0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CreateArgs(extents) = %q, want %q", got, want)
	}
}

func TestPVsShort(t *testing.T) {
	vg := func(pvs, missing int) VG { return VG{Name: "vg0", PVs: pvs, MissingPVs: missing} }
	for _, c := range []struct {
		name string
		w    Want
		vg   VG
		says string // "" when the VG can hold it
	}{
		{"linear on one PV", Want{}, vg(1, 0), ""},
		{"raid1 on one PV: wait", Want{Type: Raid1}, vg(1, 0), "volume group vg0 has 1 physical volume(s) found, LV vg0/data needs 2, one for each of its 2 raid1 legs"},
		{"raid1 on two", Want{Type: Raid1}, vg(2, 0), ""},
		{"raid1 on two, one missing: wait", Want{Type: Raid1}, vg(2, 1), "has 1 physical volume(s) found"},
		{"raid1, three legs on two: wait", Want{Type: Raid1, Mirrors: 2}, vg(2, 0), "needs 3"},
		{"striped 3 on 2: wait", Want{Type: Striped, Stripes: 3}, vg(2, 0), "needs 3, one for each of its 3 stripes; add a disk"},
		{"striped 2 on 3", Want{Type: Striped, Stripes: 2}, vg(3, 0), ""},
		{"no pv_count in the report: lvcreate says", Want{Type: Raid1}, vg(-1, 0), ""},
	} {
		w := c.w
		w.VG, w.Name = "vg0", "data"
		got := PVsShort(w, c.vg)
		if c.says == "" && got != "" || c.says != "" && !strings.Contains(strings.ReplaceAll(got, ":", ";"), strings.ReplaceAll(c.says, ":", ";")) {
			t.Errorf("%s: PVsShort = %q, want %q", c.name, got, c.says)
		}
	}
}

func TestGranule(t *testing.T) {
	const ext = 4 << 20
	for _, c := range []struct {
		w    Want
		want int64
	}{
		{Want{}, ext},
		{Want{Type: Raid1}, ext},
		{Want{Type: Striped, Stripes: 3}, 3 * ext},
	} {
		if got := Granule(c.w, ext); got != c.want {
			t.Errorf("Granule(%+v) = %d, want %d", c.w, got, c.want)
		}
	}
	// 10 MiB over 3 stripes of 4 MiB extents: lvm2 makes 12 MiB.
	if got := Round(10<<20, Granule(Want{Type: Striped, Stripes: 3}, ext)); got != 12<<20 {
		t.Errorf("10 MiB striped over 3: %d, want %d", got, 12<<20)
	}
}

// lvs-raid-missing.json and vgs-raid-missing.json: from TestLVMRaid's
// guest (test/os) once one of vgraid's two disks was pulled: the raid1
// LV active on its leg left, the striped LV (deactivated before) not,
// the VG with one PV of two missing. Health names the missing PV; a new
// raid1 LV there would wait.
func TestParseRaidMissing(t *testing.T) {
	vgs, err := ParseVGs(read(t, "vgs-raid-missing.json"))
	if err != nil || len(vgs) != 2 {
		t.Fatalf("ParseVGs = %+v, %v", vgs, err)
	}
	vg := vgs[1]
	if vg.Name != "vgraid" || vg.PVs != 2 || vg.MissingPVs != 1 || vgs[0].PVs != 1 {
		t.Errorf("VGs = %+v, want vgraid with 2 PVs, 1 missing (and vgenc with 1)", vgs)
	}
	lvs, err := ParseLVs(read(t, "lvs-raid-missing.json"))
	if err != nil || len(lvs) != 2 {
		t.Fatalf("ParseLVs = %+v, %v", lvs, err)
	}
	mirror, stripe := lvs[0], lvs[1]
	if mirror.Segtype != Raid1 || !mirror.Active || !mirror.Open || Owner(mirror) != "mirror" || mirror.Size != 32<<20 {
		t.Errorf("raid1 LV = %+v, want raid1, active, open, volume mirror's, 32 MiB", mirror)
	}
	if stripe.Segtype != Striped || stripe.Active {
		t.Errorf("striped LV = %+v, want striped, inactive", stripe)
	}
	if h := Health(Source{LV: mirror, VG: vg}); len(h) != 1 || !strings.Contains(h[0], "volume group vgraid is missing 1 physical volume(s)") {
		t.Errorf("Health = %q, want the missing PV named", h)
	}
	if why := PVsShort(Want{VG: "vgraid", Name: "m2", Type: Raid1}, vg); !strings.Contains(why, "has 1 physical volume(s) found") {
		t.Errorf("PVsShort for a new raid1 LV = %q, want a wait: one PV found", why)
	}
}

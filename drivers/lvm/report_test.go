package lvm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The files under testdata are lvm2 2.03.16's own output (Debian 12's
// lvm2), captured with the arguments LVsArgs and VGsArgs build: this
// host's kernel has no device-mapper, so lvm2 cannot run here against
// real LVs, and these reports are the boundary the tests stand on.
// lvs-inactive.json: three LVs written with vgcfgrestore on a loop
// device (no dm: inactive); lvs-active.json: from the Debian 12 guest of
// TestLVM (test/os), an LV volumed created, active and mounted.
func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseLVsInactive(t *testing.T) {
	lvs, err := ParseLVs(read(t, "lvs-inactive.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := []LV{
		{VG: "vgcap", Name: "data", UUID: "k3Jd1B-7dUe-Xf0s-Kq3e-1cFx-9bQz-Zx2A7a", Tags: []string{"volumed:data"}, Size: 8 << 20, Segtype: "linear", Major: -1, Minor: -1, Data: -1, Metadata: -1},
		{VG: "vgcap", Name: "foreign", UUID: "Wm4pQe-0aLz-Yc8r-Tn2v-5dHs-3kJw-Bq9C1d", Size: 4 << 20, Segtype: "linear", Major: -1, Minor: -1, Data: -1, Metadata: -1},
		{VG: "vgcap", Name: "other", UUID: "Pp0aaa-1bbb-2ccc-3ddd-4eee-5fff-6gggg7", Tags: []string{"backup", "volumed:logs"}, Size: 4 << 20, Segtype: "linear", Major: -1, Minor: -1, Data: -1, Metadata: -1},
	}
	if !reflect.DeepEqual(lvs, want) {
		t.Errorf("ParseLVs =\n%+v\nwant\n%+v", lvs, want)
	}
	if got := Owner(lvs[2]); got != "logs" {
		t.Errorf("Owner of an LV tagged backup,volumed:logs = %q, want logs", got)
	}
}

func TestParseLVsActive(t *testing.T) {
	lvs, err := ParseLVs(read(t, "lvs-active.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(lvs) != 1 {
		t.Fatalf("ParseLVs = %+v, want one LV", lvs)
	}
	lv := lvs[0]
	if !lv.Active || !lv.Open || lv.Major <= 0 || lv.Minor < 0 || Owner(lv) != "data" || lv.Segtype != "linear" {
		t.Errorf("the active, mounted LV volumed made reads as %+v: want active, open, with device numbers, owned by data, linear", lv)
	}
}

func TestParseEmpty(t *testing.T) {
	lvs, err := ParseLVs(read(t, "lvs-empty.json"))
	if err != nil || len(lvs) != 0 {
		t.Errorf("ParseLVs of an empty report = %v, %v", lvs, err)
	}
	vgs, err := ParseVGs(read(t, "vgs-empty.json"))
	if err != nil || len(vgs) != 0 {
		t.Errorf("ParseVGs of an empty report = %v, %v", vgs, err)
	}
}

func TestParseVGs(t *testing.T) {
	vgs, err := ParseVGs(read(t, "vgs.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Captured before pv_count was asked: not known (-1).
	want := []VG{{Name: "vgcap", UUID: "MuYDGF-tHNO-dCfd-qtgy-8iOd-cySH-LttJhc", Size: 60 << 20, Free: 44 << 20, ExtentSize: 4 << 20, PVs: -1}}
	if !reflect.DeepEqual(vgs, want) {
		t.Errorf("ParseVGs = %+v, want %+v", vgs, want)
	}
	vgs, err = ParseVGs([]byte(`{"report":[{"vg":[{"vg_name":"vgr","vg_uuid":"u","vg_size":"1","vg_free":"0","vg_extent_size":"1","vg_missing_pv_count":"1","pv_count":"2"}]}]}`))
	if err != nil || len(vgs) != 1 || vgs[0].PVs != 2 || vgs[0].MissingPVs != 1 {
		t.Errorf("ParseVGs of a VG of two PVs, one missing = %+v, %v", vgs, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"not json":      `Volume group "x" not found`,
		"size w/ unit":  `{"report":[{"lv":[{"lv_name":"a","lv_uuid":"u","vg_name":"v","lv_size":"8.00m","lv_kernel_major":"-1","lv_kernel_minor":"-1"}]}]}`,
		"no uuid":       `{"report":[{"lv":[{"lv_name":"a","vg_name":"v","lv_size":"1","lv_kernel_major":"-1","lv_kernel_minor":"-1"}]}]}`,
		"rows not list": `{"report":[{"lv":{"lv_name":"a"}}]}`,
	} {
		if lvs, err := ParseLVs([]byte(in)); err == nil {
			t.Errorf("%s: ParseLVs(%s) = %+v, want an error", name, in, lvs)
		}
	}
	if _, err := ParseVGs([]byte(`{"report":[{"vg":[{"vg_name":"v","vg_size":"x","vg_free":"0","vg_extent_size":"1"}]}]}`)); err == nil {
		t.Error("ParseVGs took a size that is not a number")
	}
}

// An LV whose device numbers are -1 has no device, whatever lv_active
// says (a report taken while it is being deactivated).
func TestNoDeviceIsNotActive(t *testing.T) {
	lvs, err := ParseLVs([]byte(`{"report":[{"lv":[{"lv_name":"a","lv_uuid":"u","vg_name":"v","lv_size":"1","lv_active":"active","lv_kernel_major":"-1","lv_kernel_minor":"-1"}]}]}`))
	if err != nil || len(lvs) != 1 || lvs[0].Active {
		t.Errorf("ParseLVs = %+v, %v: want one inactive LV", lvs, err)
	}
}

func FuzzParseLVs(f *testing.F) {
	for _, n := range []string{"lvs-inactive.json", "lvs-active.json", "lvs-empty.json", "lvs-thin.json", "lvs-thin-full.json", "lvs-raid-missing.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		lvs, err := ParseLVs(b)
		if err != nil {
			return
		}
		for _, lv := range lvs {
			if lv.Name == "" || lv.UUID == "" || lv.VG == "" {
				t.Fatalf("ParseLVs returned an LV without its name, UUID or VG: %+v", lv)
			}
			if lv.Active && (lv.Major < 0 || lv.Minor < 0) {
				t.Fatalf("an active LV without device numbers: %+v", lv)
			}
			if lv.Data < -1 || lv.Data > 100 || lv.Metadata < -1 || lv.Metadata > 100 {
				t.Fatalf("a percentage out of range: %+v", lv)
			}
		}
	})
}

// lvs-thin.json and vgs-thin.json: from TestLVMThin's guest (test/os),
// with the columns this slice asks: a linear LV volumed grew, a thin pool
// the test made, a thin LV volumed made in it.
func TestParseThin(t *testing.T) {
	lvs, err := ParseLVs(read(t, "lvs-thin.json"))
	if err != nil || len(lvs) != 3 {
		t.Fatalf("ParseLVs = %+v, %v", lvs, err)
	}
	grow, pool, thin := lvs[0], lvs[1], lvs[2]
	if grow.Segtype != "linear" || grow.Pool != "" || grow.Data != -1 || grow.Metadata != -1 || grow.Size != 96<<20 {
		t.Errorf("linear LV = %+v, want no pool, no percentages, 96 MiB", grow)
	}
	if pool.Segtype != "thin-pool" || pool.Data != 19.53 || pool.Metadata != 11.13 || pool.Size != 128<<20 {
		t.Errorf("thin pool = %+v, want 19.53%% data, 11.13%% metadata, 128 MiB", pool)
	}
	if thin.Segtype != "thin" || thin.Pool != "pool" || Owner(thin) != "thin" || thin.Size != 256<<20 || !thin.Active {
		t.Errorf("thin LV = %+v, want thin in pool, volume thin's, 256 MiB, active", thin)
	}
	vgs, err := ParseVGs(read(t, "vgs-thin.json"))
	if err != nil || len(vgs) != 1 || vgs[0].Size != 532676608 || vgs[0].Free != 289406976 || vgs[0].MissingPVs != 0 {
		t.Errorf("ParseVGs = %+v, %v", vgs, err)
	}
	s := Source{LV: thin, VG: vgs[0], Pool: &pool}
	if h := Health(s); len(h) != 0 {
		t.Errorf("Health at 19.53%% = %q, want nothing", h)
	}
}

// lvs-thin-full.json: the same guest once dd filled the thin LV: the
// pool at 94.53%: Health says so, naming the pool and the LV.
func TestParseThinFull(t *testing.T) {
	lvs, err := ParseLVs(read(t, "lvs-thin-full.json"))
	if err != nil || len(lvs) != 3 {
		t.Fatalf("ParseLVs = %+v, %v", lvs, err)
	}
	h := Health(Source{LV: lvs[2], VG: VG{Name: "vgthin"}, Pool: &lvs[1]})
	if len(h) != 1 || !strings.Contains(h[0], "thin pool vgthin/pool is 94.5% full (data): at 100% writes to LV vgthin/thin fail") {
		t.Errorf("Health = %q", h)
	}
}

func TestParsePercentRefusesNonsense(t *testing.T) {
	for _, v := range []string{"x", "-1", "100.5"} {
		doc := `{"report":[{"lv":[{"lv_name":"a","lv_uuid":"u","vg_name":"v","lv_size":"1","lv_kernel_major":"-1","lv_kernel_minor":"-1","data_percent":"` + v + `"}]}]}`
		if _, err := ParseLVs([]byte(doc)); err == nil {
			t.Errorf("data_percent %q was taken", v)
		}
	}
}

// lvs-two-segments.json: an LV over two PVs (its extents in two
// segments), written with vgcfgrestore on two loop devices. segtype is a
// segment's field, so lvs gives it one row per segment: read as two LVs,
// the volume's LV was "two LVs with its tag" and refused (TestLVMGroup's
// first run, an LV of 300 MiB over two 256 MiB disks).
func TestParseLVsOfSegments(t *testing.T) {
	lvs, err := ParseLVs(read(t, "lvs-two-segments.json"))
	if err != nil || len(lvs) != 1 || lvs[0].UUID != "Sg2seg-aaaa-bbbb-cccc-dddd-eeee-ffffgg" || lvs[0].Size != 304<<20 {
		t.Fatalf("ParseLVs = %+v, %v: want the one LV", lvs, err)
	}
	if s := Decide(Want{Volume: "data", VG: "vgseg", Name: "data"}, true, lvs); s.Action != Activate || !s.Owned {
		t.Errorf("Decide over an LV of two segments = %+v, want it activated as the volume's", s)
	}
}

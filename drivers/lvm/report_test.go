package lvm

import (
	"os"
	"path/filepath"
	"reflect"
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
	want := []VG{{Name: "vgcap", UUID: "MuYDGF-tHNO-dCfd-qtgy-8iOd-cySH-LttJhc", Size: 60 << 20, Free: 44 << 20, ExtentSize: 4 << 20}}
	if !reflect.DeepEqual(vgs, want) {
		t.Errorf("ParseVGs = %+v, want %+v", vgs, want)
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
	for _, n := range []string{"lvs-inactive.json", "lvs-active.json", "lvs-empty.json"} {
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
		}
	})
}

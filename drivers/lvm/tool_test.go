package lvm

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/readonce"
)

// fakeLVM stands in for lvm2's commands at the Runner boundary: this
// host's kernel has no device-mapper, so the real tools cannot create or
// activate an LV here (TestLVM in test/os runs them in a Debian 12
// guest). It answers with lvm2's captured reports and records every
// argument vector it is handed.
type fakeLVM struct {
	vgs, lvs []byte
	fail     map[string]string // subcommand -> stderr of a failed run
	calls    [][]string
}

func (f *fakeLVM) Run(_ context.Context, args []string) ([]byte, []byte, error) {
	f.calls = append(f.calls, args)
	if msg, ok := f.fail[args[0]]; ok {
		return nil, []byte(msg), errors.New("exit status 5")
	}
	switch args[0] {
	case "vgs":
		return f.vgs, nil, nil
	case "lvs":
		return f.lvs, nil, nil
	}
	return nil, nil, nil
}

func TestLVsOfAMissingVG(t *testing.T) {
	f := &fakeLVM{vgs: read(t, "vgs.json")}
	lvs, found, err := Tool{Runner: f}.LVs(context.Background(), "vgnone")
	if err != nil || found || lvs != nil {
		t.Fatalf("LVs(vgnone) = %v, %v, %v: want not found, no error", lvs, found, err)
	}
	if len(f.calls) != 1 {
		t.Errorf("lvs was run for a VG vgs does not list: %v", f.calls)
	}
}

func TestLVs(t *testing.T) {
	f := &fakeLVM{vgs: read(t, "vgs.json"), lvs: read(t, "lvs-inactive.json")}
	lvs, found, err := Tool{Runner: f}.LVs(context.Background(), "vgcap")
	if err != nil || !found || len(lvs) != 3 {
		t.Fatalf("LVs(vgcap) = %v, %v, %v", lvs, found, err)
	}
	want := [][]string{
		{"vgs", "--reportformat", "json", "--units", "b", "--nosuffix", "-o", "vg_name,vg_uuid,vg_size,vg_free,vg_extent_size,vg_missing_pv_count,pv_count,vg_tags"},
		{"lvs", "--reportformat", "json", "--units", "b", "--nosuffix", "--binary", "-o",
			"lv_name,lv_uuid,lv_tags,lv_size,lv_active,lv_device_open,lv_kernel_major,lv_kernel_minor,segtype,vg_name,pool_lv,data_percent,metadata_percent," +
				"vg_uuid,vg_size,vg_free,vg_extent_size,vg_missing_pv_count,pv_count,vg_tags", "vgcap"},
	}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("commands run:\n%q\nwant\n%q", f.calls, want)
	}
}

// In a window (internal/readonce) a VG's LVs come from the one lvs of
// every VG when the window holds it, and always under a filter (lvm2
// sees only the VG's PVs then): the LVs of vgcap, not another VG's, and
// one vgs and one lvs for a VG's LVs, Tagged and ByUUID together.
func TestAVGsLVsFromTheOneReport(t *testing.T) {
	other := strings.Replace(string(read(t, "lvs-inactive.json")), `"lv_name":"foreign"`, `"lv_name":"x"`, 1)
	other = strings.Replace(other, `"vgcap"`, `"vgother"`, 1)
	for _, tool := range []Tool{{}, {Devices: []string{"/dev/vdb"}}} {
		f := &fakeLVM{vgs: read(t, "vgs.json"), lvs: []byte(other)}
		tool.Runner = f
		ctx := readonce.Open(context.Background())
		if _, err := tool.Tagged(ctx); err != nil {
			t.Fatal(err)
		}
		lvs, found, err := tool.LVs(ctx, "vgcap")
		if err != nil || !found || len(lvs) != 2 || slices.ContainsFunc(lvs, func(lv LV) bool { return lv.VG != "vgcap" }) {
			t.Errorf("LVs(vgcap) with %v = %+v, %v, %v: want vgcap's two", tool.Devices, lvs, found, err)
		}
		if _, _, err := tool.ByUUID(ctx, "vgcap", "x"); err != nil {
			t.Fatal(err)
		}
		var cmds []string
		for _, c := range f.calls {
			cmds = append(cmds, c[0]+" "+c[len(c)-1])
		}
		if want := []string{"lvs " + AllLVsArgs()[len(AllLVsArgs())-1], "vgs " + VGsArgs()[len(VGsArgs())-1]}; !slices.Equal(cmds, want) {
			t.Errorf("with %v ran %q, want %q", tool.Devices, cmds, want)
		}
	}
	f := &fakeLVM{vgs: read(t, "vgs.json"), lvs: read(t, "lvs-inactive.json")}
	if _, _, err := (Tool{Runner: f}).LVs(readonce.Open(context.Background()), "vgcap"); err != nil || f.calls[1][len(f.calls[1])-1] != "vgcap" {
		t.Errorf("LVs(vgcap) unfiltered, the window holding no report of every VG, ran %q (%v): want lvs of vgcap alone", f.calls, err)
	}
}

func TestCreateArgs(t *testing.T) {
	got := CreateArgs(Want{Volume: "data", VG: "vg0", Name: "data", Size: 1 << 30})
	want := []string{"lvcreate", "--yes", "--type", "linear", "--name", "data", "--size", "1073741824b",
		"--addtag", "volumed:data", "--zero", "y", "--wipesignatures", "y", "--activate", "y", "vg0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CreateArgs = %q, want %q", got, want)
	}
}

func TestCreateArgsThin(t *testing.T) {
	got := CreateArgs(Want{Volume: "data", VG: "vg0", Name: "data", Size: 1 << 30, Type: Thin, ThinPool: "pool"})
	want := []string{"lvcreate", "--yes", "--type", "thin", "--name", "data", "--virtualsize", "1073741824b",
		"--thinpool", "pool", "--addtag", "volumed:data", "--activate", "y", "vg0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CreateArgs(thin) = %q, want %q", got, want)
	}
}

func TestActivateArgs(t *testing.T) {
	lv := LV{VG: "vg0", Name: "data"}
	if got := ActivateArgs(lv, true); !reflect.DeepEqual(got, []string{"lvchange", "--activate", "y", "--ignoreactivationskip", "vg0/data"}) {
		t.Errorf("ActivateArgs(on) = %q", got)
	}
	if got := ActivateArgs(lv, false); !reflect.DeepEqual(got, []string{"lvchange", "--activate", "n", "vg0/data"}) {
		t.Errorf("ActivateArgs(off) = %q", got)
	}
}

// A failed command's error names what was being done and lvm2's reason
// (its last lines), not only an exit status.
func TestErrorsSayWhy(t *testing.T) {
	f := &fakeLVM{fail: map[string]string{"lvcreate": "  WARNING: noise\n  Volume group \"vg0\" has insufficient free space (10 extents): 256 required.\n"}}
	err := Tool{Runner: f}.Create(context.Background(), Want{Volume: "data", VG: "vg0", Name: "data", Size: 1 << 30})
	if err == nil || !strings.Contains(err.Error(), "create LV vg0/data") || !strings.Contains(err.Error(), "insufficient free space") {
		t.Errorf("Create's error = %v, want it to name the LV and lvm2's reason", err)
	}
}

func TestDeactivateRefusesAnOpenLV(t *testing.T) {
	f := &fakeLVM{}
	err := Tool{Runner: f}.Deactivate(context.Background(), LV{VG: "vg0", Name: "data", Active: true, Open: true})
	if !errors.Is(err, ErrBusy) || len(f.calls) != 0 {
		t.Errorf("Deactivate of an open LV = %v after %q, want ErrBusy and no command", err, f.calls)
	}
}

// ByUUID is one lvs of every VG (it is read at each resync's drift
// check of each LV): the LV of that VG and UUID, and not found, with no
// error, for a UUID in another VG or a VG that is gone.
func TestByUUID(t *testing.T) {
	f := &fakeLVM{lvs: read(t, "lvs-inactive.json")}
	tool := Tool{Runner: f}
	ctx := context.Background()
	lv, found, err := tool.ByUUID(ctx, "vgcap", "Wm4pQe-0aLz-Yc8r-Tn2v-5dHs-3kJw-Bq9C1d")
	if err != nil || !found || lv.Name != "foreign" || lv.VG != "vgcap" {
		t.Fatalf("ByUUID = %+v, %v, %v: want vgcap/foreign", lv, found, err)
	}
	want := [][]string{AllLVsArgs()}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("commands run:\n%q\nwant one lvs of every VG\n%q", f.calls, want)
	}
	for _, vg := range []string{"vgnone", "vgother"} {
		if lv, found, err := tool.ByUUID(ctx, vg, "Wm4pQe-0aLz-Yc8r-Tn2v-5dHs-3kJw-Bq9C1d"); err != nil || found {
			t.Errorf("ByUUID(%s) = %+v, %v, %v: want not found, no error", vg, lv, found, err)
		}
	}
	f.fail = map[string]string{"lvs": "  Failed to read metadata."}
	if _, _, err := tool.ByUUID(ctx, "vgcap", "x"); err == nil {
		t.Error("ByUUID with lvs failing: no error")
	}
}

// Find is one lvs of every VG with each LV's VG's fields (it runs at
// every resync's health check of each LV): the LV, its VG and its pool;
// not found, with no error, for another VG's LV or a VG that is gone.
func TestFindRunsOneReport(t *testing.T) {
	f := &fakeLVM{lvs: []byte(`{"report": [{"lv": [
		{"lv_name": "pool", "lv_uuid": "p1", "lv_tags": "", "lv_size": "134217728", "lv_active": "active", "lv_device_open": "0", "lv_kernel_major": "253", "lv_kernel_minor": "2", "segtype": "thin-pool", "vg_name": "vg0", "pool_lv": "", "data_percent": "91.00", "metadata_percent": "10.00",
		 "vg_uuid": "g0", "vg_size": "536870912", "vg_free": "1048576", "vg_extent_size": "4194304", "vg_missing_pv_count": "1", "pv_count": "2"},
		{"lv_name": "data", "lv_uuid": "u1", "lv_tags": "volumed:data", "lv_size": "268435456", "lv_active": "active", "lv_device_open": "1", "lv_kernel_major": "253", "lv_kernel_minor": "4", "segtype": "thin", "vg_name": "vg0", "pool_lv": "pool", "data_percent": "5.00", "metadata_percent": "",
		 "vg_uuid": "g0", "vg_size": "536870912", "vg_free": "1048576", "vg_extent_size": "4194304", "vg_missing_pv_count": "1", "pv_count": "2"},
		{"lv_name": "pool", "lv_uuid": "p9", "lv_tags": "", "lv_size": "8388608", "lv_active": "", "lv_device_open": "", "lv_kernel_major": "-1", "lv_kernel_minor": "-1", "segtype": "thin-pool", "vg_name": "vg9", "pool_lv": "", "data_percent": "", "metadata_percent": "",
		 "vg_uuid": "g9", "vg_size": "67108864", "vg_free": "0", "vg_extent_size": "4194304", "vg_missing_pv_count": "0", "pv_count": "1"}
	]}]}`)}
	tool := Tool{Runner: f}
	ctx := context.Background()
	s, found, err := tool.Find(ctx, "vg0", "u1")
	if err != nil || !found {
		t.Fatalf("Find = %v, %v", found, err)
	}
	if s.LV.Name != "data" || s.VG.Name != "vg0" || s.VG.MissingPVs != 1 || s.VG.PVs != 2 || s.VG.Free != 1<<20 || s.Pool == nil || s.Pool.UUID != "p1" || s.Pool.Data != 91 {
		t.Errorf("Find = %+v (pool %+v): want vg0/data, its VG missing 1 of 2 PVs, its pool p1 at 91%%", s, s.Pool)
	}
	if want := [][]string{AllLVsArgs()}; !reflect.DeepEqual(f.calls, want) {
		t.Errorf("commands run:\n%q\nwant one lvs\n%q", f.calls, want)
	}
	for _, vg := range []string{"vg9", "vgnone"} {
		if _, found, err := tool.Find(ctx, vg, "u1"); found || err != nil {
			t.Errorf("Find(%s, u1) = %v, %v: want not found, no error", vg, found, err)
		}
	}
	if got := strings.Join(AllLVsArgs(), " "); strings.Count(got, "vg_name") != 1 || !strings.Contains(got, "vg_missing_pv_count") {
		t.Errorf("AllLVsArgs = %q: want each field once, the VG's among them", got)
	}
}

package lvm

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
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
		{"vgs", "--reportformat", "json", "--units", "b", "--nosuffix", "-o", "vg_name,vg_uuid,vg_size,vg_free,vg_extent_size,vg_missing_pv_count,pv_count"},
		{"lvs", "--reportformat", "json", "--units", "b", "--nosuffix", "--binary", "-o",
			"lv_name,lv_uuid,lv_tags,lv_size,lv_active,lv_device_open,lv_kernel_major,lv_kernel_minor,segtype,vg_name,pool_lv,data_percent,metadata_percent", "vgcap"},
	}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("commands run:\n%q\nwant\n%q", f.calls, want)
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

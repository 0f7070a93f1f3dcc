package lvm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// report1 is an lvs report of rows: name, tags, segtype, open.
func report1(rows ...[4]string) []byte {
	var rs []string
	for i, r := range rows {
		rs = append(rs, fmt.Sprintf(`{"lv_name":%q,"lv_uuid":"u%d","lv_tags":%q,"lv_size":"67108864","lv_active":"","lv_device_open":%q,"lv_kernel_major":"-1","lv_kernel_minor":"-1","segtype":%q,"vg_name":"vg0","pool_lv":"","data_percent":"","metadata_percent":""}`,
			r[0], i, r[1], r[3], r[2]))
	}
	return []byte(`{"report":[{"lv":[` + strings.Join(rs, ",") + `]}]}`)
}

var vg0 = []byte(`{"report":[{"vg":[{"vg_name":"vg0","vg_uuid":"x","vg_size":"1073741824","vg_free":"536870912","vg_extent_size":"4194304","vg_missing_pv_count":"0","pv_count":"1"}]}]}`)

func TestTagged(t *testing.T) {
	for _, c := range []struct {
		tags []string
		tag  string
		want bool
	}{
		{[]string{"volumed:csi-a"}, "volumed:csi-a", true},
		{[]string{"volumed-snap:s1", "backup"}, "volumed-snap:s1", true},
		{nil, "volumed:csi-a", false},
		{[]string{"volumed:csi-b"}, "volumed:csi-a", false},
		{[]string{"volumed:csi-a", "volumed-snap:s1"}, "volumed:csi-a", false}, // whose? neither rule may take it
	} {
		if got := Tagged(LV{Tags: c.tags}, c.tag); got != c.want {
			t.Errorf("Tagged(%v, %s) = %v, want %v", c.tags, c.tag, got, c.want)
		}
	}
}

func TestSnapshot(t *testing.T) {
	ctx := context.Background()
	f := &fakeLVM{vgs: vg0, lvs: report1([4]string{"csi-a", "volumed:csi-x", "thin", "1"}, [4]string{"lin", "volumed:csi-y", "linear", "0"})}
	if err := (Tool{Runner: f}).Snapshot(ctx, "vg0", "csi-a", "csi-snap-s1", SnapTag("s1")); err != nil {
		t.Fatal(err)
	}
	want := []string{"lvcreate", "--yes", "--type", "thin", "--name", "csi-snap-s1", "--addtag", "volumed-snap:s1", "--activate", "n", "vg0/csi-a"}
	if got := f.calls[len(f.calls)-1]; !reflect.DeepEqual(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
	// Retried after a crash that left the snapshot: nothing run.
	f = &fakeLVM{vgs: vg0, lvs: report1([4]string{"csi-a", "volumed:csi-x", "thin", "1"}, [4]string{"csi-snap-s1", "volumed-snap:s1", "thin", "0"})}
	if err := (Tool{Runner: f}).Snapshot(ctx, "vg0", "csi-a", "csi-snap-s1", SnapTag("s1")); err != nil || len(f.calls) != 2 {
		t.Errorf("a snapshot already made: %v, ran %q", err, f.calls)
	}
	for name, c := range map[string]struct {
		from, name, err string
	}{
		"someone's LV of the name": {"csi-a", "lin", "not tagged volumed-snap:s1"},
		"a linear origin":          {"lin", "csi-snap-s1", "not thin"},
		"no origin":                {"gone", "csi-snap-s1", "no such LV"},
	} {
		f := &fakeLVM{vgs: vg0, lvs: report1([4]string{"csi-a", "volumed:csi-x", "thin", "1"}, [4]string{"lin", "", "linear", "0"})}
		err := (Tool{Runner: f}).Snapshot(ctx, "vg0", c.from, c.name, SnapTag("s1"))
		if err == nil || !strings.Contains(err.Error(), c.err) || len(f.calls) != 2 {
			t.Errorf("%s: %v (want %q), ran %q", name, err, c.err, f.calls)
		}
	}
}

func TestRemove(t *testing.T) {
	ctx := context.Background()
	lvs := report1([4]string{"csi-a", "volumed:csi-x", "thin", "0"}, [4]string{"root", "", "linear", "1"}, [4]string{"csi-b", "volumed:csi-y", "linear", "1"})
	f := &fakeLVM{vgs: vg0, lvs: lvs}
	if err := (Tool{Runner: f}).Remove(ctx, "vg0", "csi-a", Tag("csi-x")); err != nil {
		t.Fatal(err)
	}
	if got, want := f.calls[len(f.calls)-1], []string{"lvremove", "--yes", "vg0/csi-a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
	for name, c := range map[string]struct {
		lv, tag, err string
	}{
		"gone already":           {"csi-gone", Tag("csi-x"), ""},
		"not ours":               {"root", Tag("csi-x"), "volumed removes only its own"},
		"another volume's":       {"csi-a", Tag("csi-z"), "volumed removes only its own"},
		"open (mounted by hand)": {"csi-b", Tag("csi-y"), "in use"},
	} {
		f := &fakeLVM{vgs: vg0, lvs: lvs}
		err := (Tool{Runner: f}).Remove(ctx, "vg0", c.lv, c.tag)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) || len(f.calls) != 2 {
			t.Errorf("%s: %v (want %q), ran %q", name, err, c.err, f.calls)
		}
		if c.lv == "csi-b" && !errors.Is(err, ErrBusy) {
			t.Errorf("an open LV: %v, want ErrBusy", err)
		}
	}
}

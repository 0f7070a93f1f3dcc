package lvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fakeHost is lvm2 over a host's disks at the Runner boundary, with
// state: the PVs pvcreate made (by device, with the UUID it was given)
// and the VGs. die makes the run-th command from now on fail as a
// SIGKILL would cut it: before it (at its intent) or after it (its work
// done, its answer lost).
type fakeHost struct {
	pvs     map[string]PV // by device
	groups  []Group
	made    map[string]int // pvcreates per device
	calls   [][]string
	dieAt   int  // the command number (1-based) that dies; 0 never
	dieDone bool // it dies after its work
}

var errKilled = errors.New("killed")

func (f *fakeHost) Run(_ context.Context, args []string) ([]byte, []byte, error) {
	f.calls = append(f.calls, args)
	dies := f.dieAt == len(f.calls)
	if dies && !f.dieDone {
		return nil, nil, errKilled
	}
	out := f.do(args)
	if dies {
		return nil, nil, errKilled
	}
	return out, nil, nil
}

func (f *fakeHost) do(args []string) []byte {
	rest := args[1:]
	if len(rest) > 1 && rest[0] == "--config" {
		rest = rest[2:]
	}
	last := rest[len(rest)-1]
	switch args[0] {
	case "vgs":
		var rows []map[string]string
		for _, g := range f.groups {
			rows = append(rows, map[string]string{"vg_name": g.Name, "vg_uuid": g.UUID, "vg_tags": strings.Join(g.Tags, ",")})
		}
		return fakeReport("vg", rows)
	case "pvs":
		var rows []map[string]string
		for _, pv := range f.pvs {
			rows = append(rows, map[string]string{"pv_name": pv.Name, "pv_uuid": pv.UUID, "vg_name": pv.VG})
		}
		return fakeReport("pv", rows)
	case "pvcreate":
		f.made[last]++
		f.pvs[last] = PV{Name: last, UUID: rest[slices.Index(rest, "--uuid")+1]}
	case "vgcreate", "vgextend":
		i := slices.IndexFunc(rest, func(a string) bool { return a == "vgsel" })
		for _, d := range rest[i+1:] {
			pv := f.pvs[d]
			pv.VG = "vgsel"
			f.pvs[d] = pv
		}
		if args[0] == "vgcreate" {
			f.groups = append(f.groups, Group{Name: "vgsel", UUID: "vg-uuid", Tags: []string{GroupTag("vgsel")}})
		}
	}
	return nil
}

func fakeReport(name string, rows []map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"report": []map[string]any{{name: rows}}})
	return b
}

// disks is what the host's disks look like to PlanGroup now.
func (f *fakeHost) disks(paths ...string) []Disk {
	var out []Disk
	for _, p := range paths {
		d := Disk{Path: p, Identity: "device:path:" + p, Match: true, Blank: true}
		if pv, ok := f.pvs[p]; ok {
			d.Blank, d.NotBlank, d.Label = false, "Signature", pv.UUID
		}
		out = append(out, d)
	}
	return out
}

// converge is what volumed does at each attach: read, plan, apply, until
// the plan says use.
func (f *fakeHost) converge(w GroupWant, paths ...string) error {
	tool := Tool{Runner: f}
	for range 4 {
		groups, err := tool.Groups(context.Background())
		if err != nil {
			return err
		}
		var ours []string
		for _, d := range f.disks(paths...) {
			if OursFor(w.VG, d.Label) {
				ours = append(ours, d.Path)
			}
		}
		pvs, err := tool.PVs(context.Background(), ours)
		if err != nil {
			return err
		}
		s := PlanGroup(w, groups, f.disks(paths...), pvs)
		if s.Action == GroupUse {
			return nil
		}
		if err := tool.ApplyGroup(context.Background(), w, s); err != nil {
			return err
		}
	}
	return fmt.Errorf("no convergence: %q", f.calls)
}

// TestGroupCrashes kills the making of a VG over two disks, and then its
// growth by a third, at every command, before and after its work, and
// runs the next attach: the VG ends over the disks with one pvcreate
// each, never two. (The agent's own SIGKILL at these points, built with
// the crashpoints tag, stops between the same commands.)
func TestGroupCrashes(t *testing.T) {
	w := GroupWant{VG: "vgsel", Grow: true}
	for n := 1; n <= 6; n++ {
		for _, done := range []bool{false, true} {
			t.Run(fmt.Sprintf("command %d, after its work %v", n, done), func(t *testing.T) {
				f := &fakeHost{pvs: map[string]PV{}, made: map[string]int{}, dieAt: n, dieDone: done}
				// lvm2's error is words, not errKilled: the kill is the
				// command numbered dieAt.
				killed := func(err error) {
					if err != nil && len(f.calls) != f.dieAt {
						t.Fatal(err)
					}
				}
				killed(f.converge(w, "/dev/vdb", "/dev/vdc"))
				f.dieAt = 0
				if err := f.converge(w, "/dev/vdb", "/dev/vdc"); err != nil {
					t.Fatal(err)
				}
				f.dieAt = len(f.calls) + n
				killed(f.converge(w, "/dev/vdb", "/dev/vdc", "/dev/vdd"))
				f.dieAt = 0
				if err := f.converge(w, "/dev/vdb", "/dev/vdc", "/dev/vdd"); err != nil {
					t.Fatal(err)
				}
				want := map[string]int{"/dev/vdb": 1, "/dev/vdc": 1, "/dev/vdd": 1}
				if !reflect.DeepEqual(f.made, want) {
					t.Errorf("pvcreates per disk %v, want one each", f.made)
				}
				for _, d := range []string{"/dev/vdb", "/dev/vdc", "/dev/vdd"} {
					if f.pvs[d].VG != "vgsel" || f.pvs[d].UUID != PVUUID("vgsel", "device:path:"+d) {
						t.Errorf("PV %s is %+v", d, f.pvs[d])
					}
				}
				if len(f.groups) != 1 {
					t.Errorf("VGs %v, want one", f.groups)
				}
			})
		}
	}
}

func TestGroupCommands(t *testing.T) {
	devs := []string{"/dev/vdb", "/dev/vdc"}
	cfg := `devices { filter = [ "a|^/dev/vdb$|", "a|^/dev/vdc$|", "r|.*|" ] global_filter = [ "a|^/dev/vdb$|", "a|^/dev/vdc$|", "r|.*|" ] use_devicesfile = 0 }`
	if got := FilterConfig(devs); got != cfg {
		t.Errorf("FilterConfig = %s\nwant %s", got, cfg)
	}
	d := Disk{Path: "/dev/vdb", Identity: "device:serial:B"}
	tests := []struct{ got, want []string }{
		{PVCreateArgs(devs, "vg0", d), []string{"pvcreate", "--config", cfg, "--uuid", PVUUID("vg0", "device:serial:B"), "--norestorefile", "/dev/vdb"}},
		{VGCreateArgs(devs, GroupWant{VG: "vg0", ExtentSize: 8 << 20}, devs), []string{"vgcreate", "--config", cfg, "--addtag", "volumed:vg0",
			"--setautoactivation", "n", "--physicalextentsize", "8192k", "vg0", "/dev/vdb", "/dev/vdc"}},
		{VGCreateArgs(devs, GroupWant{VG: "vg0"}, devs[:1]), []string{"vgcreate", "--config", cfg, "--addtag", "volumed:vg0", "--setautoactivation", "n", "vg0", "/dev/vdb"}},
		{VGExtendArgs(devs, "vg0", devs[1:]), []string{"vgextend", "--config", cfg, "vg0", "/dev/vdc"}},
		{PVsArgs(devs), []string{"pvs", "--config", cfg, "--reportformat", "json", "-o", "pv_name,pv_uuid,vg_name"}},
	}
	for _, tc := range tests {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("args %q\nwant %q", tc.got, tc.want)
		}
	}
	if FilterConfig(nil) != `devices { filter = [ "r|.*|" ] global_filter = [ "r|.*|" ] use_devicesfile = 0 }` {
		t.Errorf("FilterConfig(nil) = %s: want every device refused", FilterConfig(nil))
	}
	// A Tool with Devices filters every command it runs, the LV ones too.
	f := &fakeLVM{vgs: read(t, "vgs.json")}
	if _, _, err := (Tool{Runner: f, Devices: devs}).LVs(context.Background(), "vgnone"); err != nil || f.calls[0][1] != "--config" || f.calls[0][2] != cfg {
		t.Errorf("a filtered tool ran %q (%v)", f.calls, err)
	}
	if err := (Tool{Runner: f}).ApplyGroup(context.Background(), GroupWant{VG: "vg0"}, GroupStep{Action: GroupCreate, Devices: []string{`/dev/a"b`}}); err == nil {
		t.Error("a device with a quote went into a filter")
	}
}

func TestParseGroupsAndPVs(t *testing.T) {
	g, err := ParseGroups([]byte(`{"report":[{"vg":[{"vg_name":"vg0","vg_uuid":"u","vg_tags":"volumed:vg0,x"}]}]}`))
	if err != nil || !reflect.DeepEqual(g, []Group{{Name: "vg0", UUID: "u", Tags: []string{"volumed:vg0", "x"}}}) {
		t.Errorf("ParseGroups = %v, %v", g, err)
	}
	p, err := ParsePVs([]byte(`{"report":[{"pv":[{"pv_name":"/dev/vdb","pv_uuid":"u","vg_name":""}]}]}`))
	if err != nil || !reflect.DeepEqual(p, []PV{{Name: "/dev/vdb", UUID: "u"}}) {
		t.Errorf("ParsePVs = %v, %v", p, err)
	}
	for _, bad := range []string{`{"report":[{"pv":[{"pv_name":""}]}]}`, `not json`} {
		if _, err := ParsePVs([]byte(bad)); err == nil {
			t.Errorf("ParsePVs(%s): no error", bad)
		}
	}
}

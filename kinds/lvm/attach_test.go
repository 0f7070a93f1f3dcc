package lvm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/store"
)

// fakeVG is one volume group behind lvm2's commands, at the Runner
// boundary: this host's kernel has no device-mapper, so lvcreate and
// lvchange cannot run here (TestLVM in test/os runs them in a Debian 12
// guest). It answers vgs and lvs with reports of lvm2's shape
// (drivers/lvm/testdata has lvm2's own), carries out lvcreate and
// lvchange on its LVs, and makes the sysfs link of each active LV's
// device under sys.
type fakeVG struct {
	t     *testing.T
	name  string
	sys   string
	lvs   []lvmdrv.LV
	calls []string // subcommands run
	minor int
	// missing is the VG's vg_missing_pv_count, pvs its pv_count (0: 1).
	missing, pvs int
	// free is the VG's vg_free in bytes ("": 1 GiB); vgTags its tags.
	free, vgTags string
	// refuse is what lvm2 says on stderr when a command of that name
	// fails ("lvchange": the LV will not activate).
	refuse map[string]string
}

func newFakeVG(t *testing.T, lvs ...lvmdrv.LV) *fakeVG {
	f := &fakeVG{t: t, name: "vg0", sys: t.TempDir(), lvs: lvs}
	for i := range f.lvs {
		if f.lvs[i].Active {
			f.activate(&f.lvs[i])
		}
	}
	return f
}

func (f *fakeVG) activate(lv *lvmdrv.LV) {
	lv.Active, lv.Major, lv.Minor = true, 253, f.minor
	f.minor++
	dir := filepath.Join(f.sys, "dev", "block")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	link := filepath.Join(dir, fmt.Sprintf("253:%d", lv.Minor))
	if err := os.Symlink(fmt.Sprintf("../../devices/virtual/block/dm-%d", lv.Minor), link); err != nil && !os.IsExist(err) {
		f.t.Fatal(err)
	}
}

func (f *fakeVG) report(name string, rows []map[string]string) []byte {
	b, err := json.Marshal(map[string]any{"report": []map[string]any{{name: rows}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *fakeVG) Run(_ context.Context, args []string) ([]byte, []byte, error) {
	f.calls = append(f.calls, args[0])
	if msg, ok := f.refuse[args[0]]; ok {
		return nil, []byte(msg), errors.New("exit status 5")
	}
	arg := func(flag string) string {
		i := slices.Index(args, flag)
		if i < 0 || i+1 >= len(args) {
			return ""
		}
		return args[i+1]
	}
	vg := map[string]string{"vg_name": f.name, "vg_uuid": "vgu", "vg_size": "1073741824", "vg_free": cmp.Or(f.free, "1073741824"), "vg_tags": f.vgTags, "vg_extent_size": "4194304",
		"vg_missing_pv_count": strconv.Itoa(f.missing), "pv_count": strconv.Itoa(cmp.Or(f.pvs, 1))}
	switch args[0] {
	case "vgs":
		return f.report("vg", []map[string]string{vg}), nil, nil
	case "lvs":
		var rows []map[string]string
		for _, lv := range f.lvs {
			open, major, minor, active := "-1", "-1", "-1", ""
			if lv.Active {
				open, major, minor, active = "0", "253", strconv.Itoa(lv.Minor), "active"
				if lv.Open {
					open = "1"
				}
			}
			row := map[string]string{"lv_name": lv.Name, "lv_uuid": lv.UUID, "lv_tags": strings.Join(lv.Tags, ","),
				"lv_size": strconv.FormatInt(lv.Size, 10), "lv_active": active, "lv_device_open": open,
				"lv_kernel_major": major, "lv_kernel_minor": minor, "segtype": cmp.Or(lv.Segtype, "linear"), "vg_name": f.name,
				"pool_lv": lv.Pool, "data_percent": pct(lv.Data), "metadata_percent": pct(lv.Metadata)}
			if strings.Contains(strings.Join(args, " "), "vg_uuid") {
				maps.Copy(row, vg) // the LV's VG's fields, asked of lvs
			}
			rows = append(rows, row)
		}
		return f.report("lv", rows), nil, nil
	case "lvcreate":
		size, _ := strconv.ParseInt(strings.TrimSuffix(arg("--size")+arg("--virtualsize"), "b"), 10, 64)
		lv := lvmdrv.LV{VG: f.name, Name: arg("--name"), UUID: "new-" + arg("--name"), Tags: []string{arg("--addtag")}, Size: size, Segtype: arg("--type")}
		f.activate(&lv)
		f.lvs = append(f.lvs, lv)
	case "lvextend":
		size, _ := strconv.ParseInt(strings.TrimSuffix(arg("--size"), "b"), 10, 64)
		for i := range f.lvs {
			if f.lvs[i].Ref() == args[len(args)-1] {
				f.lvs[i].Size = size
			}
		}
	case "lvchange":
		ref := args[len(args)-1]
		for i := range f.lvs {
			if f.lvs[i].Ref() != ref {
				continue
			}
			if arg("--activate") == "y" {
				f.activate(&f.lvs[i])
			} else {
				f.lvs[i].Active, f.lvs[i].Major, f.lvs[i].Minor = false, -1, -1
			}
		}
	}
	return nil, nil, nil
}

// pct is a percentage as lvs reports it: "" for none (0 in a fake LV
// that is no pool).
func pct(v float64) string {
	if v <= 0 {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func (f *fakeVG) attacher() attacher {
	return attacher{tool: lvmdrv.Tool{Runner: f}, sysRoot: f.sys}
}

func desired(name string, s Source) *agent.Desired {
	return &agent.Desired{Name: name, Kind: Name, Spec: &manifest.VolumeSpec{Source: manifest.Source{Kind: Name, Spec: &s}}}
}

var data = desired("data", Source{VolumeGroup: "vg0", Size: "64Mi"})

// A missing LV is created once, tagged, and found again by Find.
func TestAttachCreates(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "root", UUID: "r", Active: true})
	a := f.attacher()
	ctx := context.Background()
	if got, err := a.Find(ctx, data); err != nil || len(got) != 0 {
		t.Fatalf("Find before the LV exists = %+v, %v", got, err)
	}
	got, err := a.Attach(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	want := agent.Found{Device: "/dev/dm-1", Identity: "lvm:vg0/new-data", Owned: true, Reusable: true, Created: true}
	if got != want {
		t.Errorf("Attach = %+v, want %+v", got, want)
	}
	lv := f.lvs[1]
	if lvmdrv.Owner(lv) != "data" || lv.Size != 64<<20 {
		t.Errorf("the LV made is %+v, want tagged volumed:data, 64 MiB", lv)
	}
	found, err := a.Find(ctx, data)
	if err != nil || len(found) != 1 || found[0].Identity != want.Identity || !found[0].Owned || found[0].Created {
		t.Errorf("Find after the attach = %+v, %v: want the LV, owned, not created by this call", found, err)
	}
	if n := strings.Count(strings.Join(f.calls, " "), "lvcreate"); n != 1 {
		t.Errorf("lvcreate ran %d times: %q", n, f.calls)
	}
}

// A thin LV is made in its pool, tagged like a linear one.
func TestAttachCreatesThin(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "pool", UUID: "p", Segtype: "thin-pool", Active: true})
	got, err := f.attacher().Attach(context.Background(), desired("thin", Source{VolumeGroup: "vg0", Size: "1Gi", Type: lvmdrv.Thin, ThinPool: "pool"}))
	if err != nil {
		t.Fatal(err)
	}
	lv := f.lvs[1]
	if !got.Created || lvmdrv.Owner(lv) != "thin" || lv.Segtype != "thin" || lv.Size != 1<<30 {
		t.Errorf("Attach = %+v, LV %+v: want a thin LV of 1 GiB, tagged volumed:thin, created", got, lv)
	}
}

// After a reboot the volume's LV is inactive: the attach activates it,
// creating nothing; Verify of the record says it is not there until then.
func TestAttachActivates(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Size: 64 << 20, Major: -1, Minor: -1})
	a := f.attacher()
	ctx := context.Background()
	rec := store.Attachment{Kind: Name, Device: "/dev/dm-7", Identity: "lvm:vg0/u1", Owned: true}
	if _, ok, err := a.Verify(ctx, rec); ok || err != nil {
		t.Errorf("Verify of an inactive LV = %v, %v: want not there", ok, err)
	}
	got, err := a.Attach(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Identity != "lvm:vg0/u1" || !got.Owned || got.Created {
		t.Errorf("Attach = %+v, want the LV u1, owned, not created", got)
	}
	if slices.Contains(f.calls, "lvcreate") || !slices.Contains(f.calls, "lvchange") {
		t.Errorf("commands run: %q, want an lvchange and no lvcreate", f.calls)
	}
	if dev, ok, err := a.Verify(ctx, rec); !ok || err != nil || dev != got.Device {
		t.Errorf("Verify once active = %q, %v, %v, want %s", dev, ok, err, got.Device)
	}
}

// An LV of the wanted name volumed did not create, inactive: the volume
// waits, saying why, and nothing but the reports is run.
func TestForeignInactiveIsLeft(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "shared", UUID: "s", Major: -1, Minor: -1})
	_, err := f.attacher().Attach(context.Background(), desired("ext", Source{VolumeGroup: "vg0", Name: "shared", Size: "16Mi"}))
	if err == nil || !strings.Contains(err.Error(), "volume ext, LV vg0/shared") || !strings.Contains(err.Error(), "never activates it") {
		t.Errorf("Attach = %v, want an error naming the volume and the LV, saying volumed never activates it", err)
	}
	for _, c := range f.calls {
		if c != "vgs" && c != "lvs" {
			t.Errorf("ran %s on an LV volumed did not create", c)
		}
	}
}

func TestMissingVGWaits(t *testing.T) {
	f := newFakeVG(t)
	f.name = "other"
	_, err := f.attacher().Attach(context.Background(), data)
	if err == nil || !strings.Contains(err.Error(), "volume group vg0 is not there") || slices.Contains(f.calls, "lvcreate") {
		t.Errorf("Attach with no VG vg0 = %v after %q, want a wait naming the VG, nothing created", err, f.calls)
	}
}

// Teardown deactivates the LV, unless it is open: then the core is told
// it is busy, and nothing is run.
func TestDetach(t *testing.T) {
	lv := lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Active: true, Open: true}
	f := newFakeVG(t, lv)
	a := f.attacher()
	rec := store.Attachment{Kind: Name, Identity: "lvm:vg0/u1", Owned: true}
	ctx := context.Background()
	if err := a.Detach(ctx, rec); !errors.Is(err, agent.ErrBusy) || slices.Contains(f.calls, "lvchange") {
		t.Errorf("Detach of an open LV = %v after %q, want busy and no lvchange", err, f.calls)
	}
	f.lvs[0].Open = false
	if err := a.Detach(ctx, rec); err != nil || f.lvs[0].Active {
		t.Errorf("Detach = %v, LV %+v: want it inactive", err, f.lvs[0])
	}
	if len(f.lvs) != 1 {
		t.Errorf("the LV is gone after a detach: %+v", f.lvs)
	}
	if err := a.Detach(ctx, rec); err != nil {
		t.Errorf("Detach of an inactive LV = %v, want nothing to do", err)
	}
}

// Verify, at every resync's drift check of each LV, reads one report
// (lvs), not a vgs and an lvs.
func TestVerifyRunsOneReport(t *testing.T) {
	f := newFakeVG(t, lvmdrv.LV{VG: "vg0", Name: "data", UUID: "u1", Tags: []string{"volumed:data"}, Size: 64 << 20, Active: true})
	a := f.attacher()
	rec := store.Attachment{Kind: Name, Device: "/dev/dm-0", Identity: "lvm:vg0/u1", Owned: true}
	if dev, ok, err := a.Verify(context.Background(), rec); !ok || err != nil || dev != "/dev/dm-0" {
		t.Errorf("Verify = %q, %v, %v, want /dev/dm-0", dev, ok, err)
	}
	if !slices.Equal(f.calls, []string{"lvs"}) {
		t.Errorf("commands run: %q, want one lvs", f.calls)
	}
	rec.Identity = "lvm:vg1/u1"
	if _, ok, err := a.Verify(context.Background(), rec); ok || err != nil {
		t.Errorf("Verify of an LV in a VG that is gone = %v, %v: want not there, no error", ok, err)
	}
}

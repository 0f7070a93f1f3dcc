package lvm_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/lvm"
)

func problems(t *testing.T, doc string) []string {
	t.Helper()
	_, probs := manifest.ParseBytes("v.yaml", []byte(doc), manifest.Options{Kinds: kinds.Manifest(kinds.All())})
	var got []string
	for _, p := range probs {
		got = append(got, p.Error())
	}
	return got
}

func TestCheck(t *testing.T) {
	const head = "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: v}\nspec:\n  filesystem: {type: ext4}\n  source:\n    "
	cases := []struct{ name, src, want string }{
		{"good", "lvm: {volumeGroup: vg0, size: 1Gi}", ""},
		{"good with a name", "lvm: {volumeGroup: vg0, name: data_1.x+y, size: 1Gi}", ""},
		{"no VG", "lvm: {size: 1Gi}", "v.yaml:7:5: spec.source.lvm.volumeGroup: required"},
		{"no size", "lvm: {volumeGroup: vg0}", "spec.source.lvm.size: required"},
		{"bad size", "lvm: {volumeGroup: vg0, size: lots}", "v.yaml:7:35: spec.source.lvm.size:"},
		{"VG with a slash", "lvm: {volumeGroup: vg/0, size: 1Gi}", "v.yaml:7:24: spec.source.lvm.volumeGroup: '/' is not allowed"},
		{"VG starting with -", "lvm: {volumeGroup: -vg, size: 1Gi}", "spec.source.lvm.volumeGroup: must not start with -"},
		{"reserved LV name", "lvm: {volumeGroup: vg0, name: my_tmeta, size: 1Gi}", "spec.source.lvm.name: must not contain \"_tmeta\""},
		{"unknown field", "lvm: {volumeGroup: vg0, size: 1Gi, pool: thin}", "pool"},
		{"thin", "lvm: {volumeGroup: vg0, size: 1Gi, type: thin, thinPool: pool0}", ""},
		{"linear said", "lvm: {volumeGroup: vg0, size: 1Gi, type: linear}", ""},
		{"thin without a pool", "lvm: {volumeGroup: vg0, size: 1Gi, type: thin}", "v.yaml:7:5: spec.source.lvm.thinPool: required for type thin"},
		{"a pool for linear", "lvm: {volumeGroup: vg0, size: 1Gi, thinPool: pool0}", "spec.source.lvm.thinPool: only for type thin"},
		{"unknown type", "lvm: {volumeGroup: vg0, size: 1Gi, type: raid5}", "spec.source.lvm.type:"},
		{"bad pool name", "lvm: {volumeGroup: vg0, size: 1Gi, type: thin, thinPool: p_tdata}", "spec.source.lvm.thinPool: must not contain"},
		{"striped", "lvm: {volumeGroup: vg0, size: 1Gi, type: striped, stripes: 2}", ""},
		{"striped with a stripe size", "lvm: {volumeGroup: vg0, size: 1Gi, type: striped, stripes: 3, stripeSize: 128Ki}", ""},
		{"striped without stripes", "lvm: {volumeGroup: vg0, size: 1Gi, type: striped}", "v.yaml:7:5: spec.source.lvm.stripes: required for type striped"},
		{"one stripe", "lvm: {volumeGroup: vg0, size: 1Gi, type: striped, stripes: 1}", "v.yaml:7:64: spec.source.lvm.stripes: must be 2 or more, got 1 (an LV on one PV is type linear)"},
		{"stripes for linear", "lvm: {volumeGroup: vg0, size: 1Gi, stripes: 2}", "spec.source.lvm.stripes: only for type striped, not linear"},
		{"stripe size not a power of two", "lvm: {volumeGroup: vg0, size: 1Gi, type: striped, stripes: 2, stripeSize: 96Ki}", "spec.source.lvm.stripeSize: must be a power of two of 4Ki or more"},
		{"stripe size too small", "lvm: {volumeGroup: vg0, size: 1Gi, type: striped, stripes: 2, stripeSize: 2Ki}", "spec.source.lvm.stripeSize: must be a power of two"},
		{"stripe size not a size", "lvm: {volumeGroup: vg0, size: 1Gi, type: striped, stripes: 2, stripeSize: big}", "spec.source.lvm.stripeSize:"},
		{"stripe size for raid1", "lvm: {volumeGroup: vg0, size: 1Gi, type: raid1, stripeSize: 64Ki}", "spec.source.lvm.stripeSize: only for type striped, not raid1"},
		{"striped in a thin pool", "lvm: {volumeGroup: vg0, size: 1Gi, type: striped, stripes: 2, thinPool: pool0}", "spec.source.lvm.thinPool: only for type thin"},
		{"raid1", "lvm: {volumeGroup: vg0, size: 1Gi, type: raid1}", ""},
		{"raid1, three legs", "lvm: {volumeGroup: vg0, size: 1Gi, type: raid1, mirrors: 2}", ""},
		{"extents of the free space", "lvm: {volumeGroup: vg0, extents: 100%FREE}", ""},
		{"extents of the VG, raid1", "lvm: {volumeGroup: vg0, extents: 40%VG, type: raid1}", ""},
		{"size and extents", "lvm: {volumeGroup: vg0, size: 1Gi, extents: 50%FREE}", "v.yaml:7:49: spec.source.lvm.extents: size and extents are both set"},
		{"extents not a percentage", "lvm: {volumeGroup: vg0, extents: 100}", "spec.source.lvm.extents: \"100\" is not a percentage lvm2 sizes an LV by: N%FREE, N%VG or N%PVS"},
		{"extents of an origin", "lvm: {volumeGroup: vg0, extents: 10%ORIGIN}", "spec.source.lvm.extents: \"10%ORIGIN\" is not a percentage"},
		{"extents over 100", "lvm: {volumeGroup: vg0, extents: 120%FREE}", "spec.source.lvm.extents: 120% is not from 1 to 100"},
		{"extents for thin", "lvm: {volumeGroup: vg0, extents: 50%FREE, type: thin, thinPool: p}", "spec.source.lvm.extents: not for type thin"},
		{"raid1, negative mirrors", "lvm: {volumeGroup: vg0, size: 1Gi, type: raid1, mirrors: -1}", "spec.source.lvm.mirrors: must be 1 or more"},
		{"mirrors for thin", "lvm: {volumeGroup: vg0, size: 1Gi, type: thin, thinPool: p, mirrors: 1}", "spec.source.lvm.mirrors: only for type raid1, not thin"},
		{"following the VG", "lvm: {volumeGroup: vg0, grow: true}", ""},
		{"grow and a size", "lvm: {volumeGroup: vg0, size: 1Gi, grow: true}", "spec.source.lvm.grow: size or extents set too"},
		{"grow and extents", "lvm: {volumeGroup: vg0, extents: 50%FREE, grow: true}", "spec.source.lvm.grow: size or extents set too"},
		{"grow for raid1", "lvm: {volumeGroup: vg0, grow: true, type: raid1}", "spec.source.lvm.grow: only for type linear, not raid1"},
		{"grow for thin", "lvm: {volumeGroup: vg0, grow: true, type: thin, thinPool: p}", "spec.source.lvm.grow: only for type linear, not thin"},
		{"raid1 in a thin pool", "lvm: {volumeGroup: vg0, size: 1Gi, type: raid1, thinPool: pool0}", "spec.source.lvm.thinPool: only for type thin"},
	}
	for _, c := range cases {
		got := problems(t, head+c.src+"\n")
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: %q, want none", c.name, got)
		case c.want != "" && !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, c.want) }):
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// Two volumes naming one LV of one VG: the later is refused.
func TestOneLVPerVolume(t *testing.T) {
	doc := func(name string) string {
		return "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: " + name + "}\nspec:\n  filesystem: {type: ext4}\n  source:\n    lvm: {volumeGroup: vg0, name: shared, size: 1Gi}\n"
	}
	p := t.TempDir() + "/a.yaml"
	if err := os.WriteFile(p, []byte(doc("a")+"---\n"+doc("b")), 0o644); err != nil {
		t.Fatal(err)
	}
	got := manifest.Validate([]string{p}, manifest.Options{Kinds: kinds.Manifest(kinds.All())})
	if len(got) != 1 || got[0].Field != "spec.source.lvm.name" || !strings.Contains(got[0].Error(), "LV vg0/shared") {
		t.Errorf("two volumes on LV vg0/shared: %q, want the second refused naming it", got)
	}
}

func TestIdentity(t *testing.T) {
	id := lvm.Identity(lvmdrv.LV{VG: "vg0", Name: "data", UUID: "k3Jd1B-7dUe-Xf0s-Kq3e-1cFx-9bQz-Zx2A7a"})
	if id != "lvm:vg0/k3Jd1B-7dUe-Xf0s-Kq3e-1cFx-9bQz-Zx2A7a" {
		t.Errorf("Identity = %q", id)
	}
	vg, uuid, err := lvm.ParseIdentity(id)
	if err != nil || vg != "vg0" || uuid != "k3Jd1B-7dUe-Xf0s-Kq3e-1cFx-9bQz-Zx2A7a" {
		t.Errorf("ParseIdentity(%q) = %q, %q, %v", id, vg, uuid, err)
	}
	for _, bad := range []string{"", "lvm:", "lvm:vg0", "lvm:/u", "loop:vg0/u", "device:serial:x"} {
		if _, _, err := lvm.ParseIdentity(bad); err == nil {
			t.Errorf("ParseIdentity(%q) took it", bad)
		}
	}
}

// validate warns of dm-thin and thin_check only for a thin LV.
func TestNeedsThin(t *testing.T) {
	has := func(s *lvm.Source) bool {
		n := lvm.Kind{}.Needs(s)
		return slices.ContainsFunc(n.Modules, func(m hostcheck.Module) bool { return m.Name == "dm-thin-pool" }) &&
			slices.ContainsFunc(n.Programs, func(p hostcheck.Program) bool { return p.Name == "thin_check" })
	}
	if !has(&lvm.Source{Type: "thin", ThinPool: "p"}) || has(&lvm.Source{Type: "linear"}) {
		t.Errorf("Needs: want dm-thin-pool and thin_check for thin only")
	}
}

// validate asks for dm-raid for a raid1 LV only.
func TestNeedsRaid1(t *testing.T) {
	has := func(s *lvm.Source) bool {
		return slices.ContainsFunc(lvm.Kind{}.Needs(s).Modules, func(m hostcheck.Module) bool { return m.Name == "dm-raid" })
	}
	if !has(&lvm.Source{Type: "raid1"}) || has(&lvm.Source{Type: "striped", Stripes: 2}) || has(&lvm.Source{Type: "linear"}) {
		t.Errorf("Needs: want dm-raid for raid1 only")
	}
}

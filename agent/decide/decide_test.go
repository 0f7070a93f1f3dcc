package decide

import (
	"slices"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store/record"
)

func TestGrowNeeded(t *testing.T) {
	const mi = 1 << 20
	loopVol := func(size int64, grow bool) *Desired {
		d := want("a")
		d.Caps = manifest.Caps{ImageFile: "/i", Size: size}
		d.Spec.Filesystem.Grow = grow
		return d
	}
	staged := func(devBytes int64) *record.Volume {
		v := have("a", true, true)
		v.Staging.DeviceBytes = devBytes
		return v
	}
	absent := loopVol(128*mi, true)
	absent.Absent = true
	raw := &Desired{Name: "a", Kind: "loop", Spec: &manifest.VolumeSpec{}, Block: true, Caps: manifest.Caps{ImageFile: "/i", Size: 128 * mi}}
	cases := []struct {
		name string
		d    *Desired
		rec  *record.Volume
		now  Sizes
		want bool
	}{
		{"image smaller than the manifest's size", loopVol(128*mi, false), staged(64 * mi), Sizes{Device: 64 * mi, Image: 64 * mi}, true},
		{"image as large as wanted, grow off", loopVol(64*mi, false), staged(64 * mi), Sizes{Device: 128 * mi, Image: 64 * mi}, false},
		{"device grew on the far side, grow on", loopVol(64*mi, true), staged(64 * mi), Sizes{Device: 128 * mi, Image: 64 * mi}, true},
		{"device as recorded", loopVol(64*mi, true), staged(64 * mi), Sizes{Device: 64 * mi, Image: 64 * mi}, false},
		{"a smaller manifest size never shrinks", loopVol(32*mi, true), staged(64 * mi), Sizes{Device: 64 * mi, Image: 64 * mi}, false},
		{"device size unknown", loopVol(64*mi, true), staged(64 * mi), Sizes{Device: 0, Image: 64 * mi}, false},
		{"not staged yet", loopVol(128*mi, true), have("a", true, false), Sizes{Device: 64 * mi, Image: 64 * mi}, false},
		{"being torn down", absent, staged(64 * mi), Sizes{Device: 64 * mi, Image: 64 * mi}, false},
		{"raw block image smaller than wanted: never staged, still grown", raw, have("a", true, false), Sizes{Device: 64 * mi, Image: 64 * mi}, true},
		{"raw block image as wanted", raw, have("a", true, false), Sizes{Device: 128 * mi, Image: 128 * mi}, false},
		{"raw block not attached yet", raw, have("a", false, false), Sizes{Device: 64 * mi, Image: 64 * mi}, false},
		{"a disk is there to join the source, sizes as wanted", loopVol(64*mi, true), staged(64 * mi), Sizes{Device: 64 * mi, Image: 64 * mi, Join: true}, true},
		{"a disk to join, not staged yet: the attach takes it", loopVol(64*mi, true), have("a", true, false), Sizes{Device: 64 * mi, Image: 64 * mi, Join: true}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := GrowNeeded(c.d, c.rec, c.now); got != c.want {
				t.Fatalf("GrowNeeded = %v, want %v", got, c.want)
			}
		})
	}
}

// Decide adds a grow only for a converged volume that was observed, is
// not busy and whose file is still its device's; a checked volume that
// needs none is reported settled.
func TestDecideGrowth(t *testing.T) {
	const mi = 1 << 20
	grown := func(name string) (*Desired, *record.Volume) {
		d := want(name)
		d.Spec.Filesystem.Grow = true
		v := have(name, true, true)
		v.Staging.DeviceBytes = 64 * mi
		return d, v
	}
	bigger := Sizes{Device: 128 * mi, Image: -1}
	same := Sizes{Device: 64 * mi, Image: -1}
	cases := []struct {
		name        string
		obs         func(n string) Observations
		unconverged bool
		wantOps     []string
		wantSettled []string
	}{
		{"no check asked: nothing", func(string) Observations { return Observations{} }, false, nil, nil},
		{"device grew", func(n string) Observations {
			return Observations{Sizes: map[string]Sizes{n: bigger}}
		}, false, []string{OpGrow}, nil},
		{"device as fitted", func(n string) Observations {
			return Observations{Sizes: map[string]Sizes{n: same}}
		}, false, nil, []string{"a"}},
		{"running", func(n string) Observations {
			return Observations{Sizes: map[string]Sizes{n: bigger}, Running: map[string]bool{n: true}}
		}, false, nil, nil},
		{"backing file changed", func(n string) Observations {
			return Observations{Sizes: map[string]Sizes{n: bigger}, BackingChanged: map[string]bool{n: true}}
		}, false, nil, nil},
		{"another operation planned first", func(n string) Observations {
			return Observations{Sizes: map[string]Sizes{n: bigger}}
		}, true, []string{OpMountDevice}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, v := grown("a")
			if c.unconverged {
				v.Staging = nil
			}
			dec := Decide(map[string]*Desired{"a": d}, map[string]*record.Volume{"a": v}, c.obs("a"))
			var kinds []string
			for _, op := range dec.Ops {
				kinds = append(kinds, op.Name)
			}
			if !slices.Equal(kinds, c.wantOps) || !slices.Equal(dec.GrowSettled, c.wantSettled) {
				t.Fatalf("Decide = ops %v, settled %v; want %v, %v", kinds, dec.GrowSettled, c.wantOps, c.wantSettled)
			}
		})
	}
}

// An LV-like source (Caps.RefuseShrink, no image file) grows to the
// manifest's size, read from its device; a smaller size is refused, not
// settled, and never grows anything; a loop image's is ignored.
func TestShrinkRefused(t *testing.T) {
	const mi = 1 << 20
	lvVol := func(size int64) *Desired {
		d := want("a")
		d.Kind = "lvm"
		d.Caps = manifest.Caps{Size: size, RefuseShrink: true}
		d.Spec.Filesystem.Grow = true
		return d
	}
	loopVol := lvVol(32 * mi)
	loopVol.Caps = manifest.Caps{ImageFile: "/i", Size: 32 * mi}
	staged := have("a", true, true)
	staged.Staging.DeviceBytes = 64 * mi
	cases := []struct {
		name    string
		d       *Desired
		now     Sizes
		ops     []string
		shrink  []Shrink
		settled []string
	}{
		{"larger size: grow", lvVol(128 * mi), Sizes{Device: 64 * mi, Image: 64 * mi}, []string{OpGrow}, nil, nil},
		{"LV grown, filesystem not yet (a crash between): grow again", lvVol(128 * mi), Sizes{Device: 128 * mi, Image: 128 * mi}, []string{OpGrow}, nil, nil},
		{"same size: settled", lvVol(64 * mi), Sizes{Device: 64 * mi, Image: 64 * mi}, nil, nil, []string{"a"}},
		{"smaller size: refused, naming both sizes", lvVol(32 * mi), Sizes{Device: 64 * mi, Image: 64 * mi}, nil, []Shrink{{"a", 64 * mi, 32 * mi}}, nil},
		{"smaller size, size unknown: settled", lvVol(32 * mi), Sizes{Device: 0, Image: -1}, nil, nil, []string{"a"}},
		{"size rounded up by the source (an LV's extents): settled, not a shrink", lvVol(62 * mi), Sizes{Device: 64 * mi, Image: 64 * mi, Want: 64 * mi}, nil, nil, []string{"a"}},
		{"larger size, rounded: grow to the rounding", lvVol(126 * mi), Sizes{Device: 64 * mi, Image: 64 * mi, Want: 128 * mi}, []string{OpGrow}, nil, nil},
		{"a loop image's smaller size is ignored", loopVol, Sizes{Device: 64 * mi, Image: 64 * mi}, nil, nil, []string{"a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dec := Decide(map[string]*Desired{"a": c.d}, map[string]*record.Volume{"a": staged}, Observations{Sizes: map[string]Sizes{"a": c.now}})
			var kinds []string
			for _, op := range dec.Ops {
				kinds = append(kinds, op.Name)
			}
			if !slices.Equal(kinds, c.ops) || !slices.Equal(dec.ShrinkRefused, c.shrink) || !slices.Equal(dec.GrowSettled, c.settled) {
				t.Fatalf("Decide = ops %v, shrink %v, settled %v; want %v, %v, %v", kinds, dec.ShrinkRefused, dec.GrowSettled, c.ops, c.shrink, c.settled)
			}
		})
	}
}

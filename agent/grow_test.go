package agent

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

func TestGrowNeeded(t *testing.T) {
	const mi = 1 << 20
	loopVol := func(size int64, grow bool) *Desired {
		d := want("a")
		d.Caps = manifest.Caps{ImageFile: "/i", Size: size}
		d.Spec.Filesystem.Grow = grow
		return d
	}
	staged := func(devBytes int64) *store.Volume {
		v := have("a", true, true)
		v.Staging.DeviceBytes = devBytes
		return v
	}
	absent := loopVol(128*mi, true)
	absent.Absent = true
	raw := &Desired{Name: "a", Driver: "loop", Spec: &manifest.VolumeSpec{}, Block: true, Caps: manifest.Caps{ImageFile: "/i", Size: 128 * mi}}
	cases := []struct {
		name string
		d    *Desired
		rec  *store.Volume
		now  sizes
		want bool
	}{
		{"image smaller than the manifest's size", loopVol(128*mi, false), staged(64 * mi), sizes{64 * mi, 64 * mi}, true},
		{"image as large as wanted, grow off", loopVol(64*mi, false), staged(64 * mi), sizes{128 * mi, 64 * mi}, false},
		{"device grew on the far side, grow on", loopVol(64*mi, true), staged(64 * mi), sizes{128 * mi, 64 * mi}, true},
		{"device as recorded", loopVol(64*mi, true), staged(64 * mi), sizes{64 * mi, 64 * mi}, false},
		{"a smaller manifest size never shrinks", loopVol(32*mi, true), staged(64 * mi), sizes{64 * mi, 64 * mi}, false},
		{"device size unknown", loopVol(64*mi, true), staged(64 * mi), sizes{0, 64 * mi}, false},
		{"not staged yet", loopVol(128*mi, true), have("a", true, false), sizes{64 * mi, 64 * mi}, false},
		{"being torn down", absent, staged(64 * mi), sizes{64 * mi, 64 * mi}, false},
		{"raw block image smaller than wanted: never staged, still grown", raw, have("a", true, false), sizes{64 * mi, 64 * mi}, true},
		{"raw block image as wanted", raw, have("a", true, false), sizes{128 * mi, 128 * mi}, false},
		{"raw block not attached yet", raw, have("a", false, false), sizes{64 * mi, 64 * mi}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := growNeeded(c.d, c.rec, c.now); got != c.want {
				t.Fatalf("growNeeded = %v, want %v", got, c.want)
			}
		})
	}
}

// Decide adds a grow only for a converged volume that was observed, is
// not busy and whose file is still its device's; a checked volume that
// needs none is reported settled.
func TestDecideGrowth(t *testing.T) {
	const mi = 1 << 20
	grown := func(name string) (*Desired, *store.Volume) {
		d := want(name)
		d.Spec.Filesystem.Grow = true
		v := have(name, true, true)
		v.Staging.DeviceBytes = 64 * mi
		return d, v
	}
	bigger := sizes{device: 128 * mi, image: -1}
	same := sizes{device: 64 * mi, image: -1}
	cases := []struct {
		name        string
		obs         func(n string) Observations
		unconverged bool
		wantOps     []string
		wantSettled []string
	}{
		{"no check asked: nothing", func(string) Observations { return Observations{} }, false, nil, nil},
		{"device grew", func(n string) Observations { return Observations{Sizes: map[string]sizes{n: bigger}} }, false, []string{OpGrow}, nil},
		{"device as fitted", func(n string) Observations { return Observations{Sizes: map[string]sizes{n: same}} }, false, nil, []string{"a"}},
		{"running", func(n string) Observations {
			return Observations{Sizes: map[string]sizes{n: bigger}, Running: map[string]bool{n: true}}
		}, false, nil, nil},
		{"backing file changed", func(n string) Observations {
			return Observations{Sizes: map[string]sizes{n: bigger}, BackingChanged: map[string]bool{n: true}}
		}, false, nil, nil},
		{"another operation planned first", func(n string) Observations { return Observations{Sizes: map[string]sizes{n: bigger}} }, true, []string{OpMountDevice}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, v := grown("a")
			if c.unconverged {
				v.Staging = nil
			}
			dec := Decide(map[string]*Desired{"a": d}, map[string]*store.Volume{"a": v}, c.obs("a"))
			var kinds []string
			for _, op := range dec.Ops {
				kinds = append(kinds, op.Kind)
			}
			if !slices.Equal(kinds, c.wantOps) || !slices.Equal(dec.GrowSettled, c.wantSettled) {
				t.Fatalf("Decide = ops %v, settled %v; want %v, %v", kinds, dec.GrowSettled, c.wantOps, c.wantSettled)
			}
		})
	}
}

// A device size that cannot be read is said (once, not at every check)
// and grows nothing; it is never taken silently as 0.
func TestGrowthCheckShowsUnreadableSize(t *testing.T) {
	var buf syncBuffer
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.Log = slog.New(slog.NewTextHandler(&buf, nil))
	a.driftLog = newOnceLog(a.cfg.Log)
	a.cfg.FS = &fakeFS{sizeErr: errors.New("sysfs size: no such device")}
	d := &Desired{Name: "g", Driver: "fake", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4", Grow: true}}}
	rec := &store.Volume{Name: "g", Driver: "fake",
		Attachment: &store.Attachment{Driver: "fake", Device: "/dev/fake-g", Identity: "fake:g"},
		Staging:    &store.MountRecord{Path: "/s/g", Owned: true, DeviceBytes: 64 << 20, Options: stagingOptions(d)}}
	desired, actual := map[string]*Desired{"g": d}, map[string]*store.Volume{"g": rec}
	for range 2 {
		a.askGrowthCheck()
		dec := Decide(desired, actual, a.observe(desired, actual))
		if len(dec.Ops) != 0 {
			t.Fatalf("ops %+v with an unreadable size, want none", dec.Ops)
		}
	}
	if n := strings.Count(buf.String(), "no such device"); n != 1 {
		t.Fatalf("the size error was logged %d times over two checks, want once:\n%s", n, buf.String())
	}
}

package agent

import (
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := growNeeded(c.d, c.rec, c.now); got != c.want {
				t.Fatalf("growNeeded = %v, want %v", got, c.want)
			}
		})
	}
}

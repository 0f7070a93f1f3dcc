package decide

import (
	"strings"
	"testing"
)

func TestPoolCapacity(t *testing.T) {
	for _, c := range []struct {
		name          string
		free, reserve int64
		promised      []Promise
		want          int64
	}{
		{"empty pool", 10 << 30, 1 << 30, nil, 9 << 30},
		{"a volume not yet staged promises its whole size", 10 << 30, 1 << 30, []Promise{{Size: 2 << 30}}, 7 << 30},
		{"a sparse image promises what it may still allocate", 10 << 30, 0, []Promise{{Size: 4 << 30, Allocated: 1 << 30}}, 7 << 30},
		{"an image allocated beyond its size promises nothing more", 10 << 30, 0, []Promise{{Size: 1 << 30, Allocated: 2 << 30}}, 10 << 30},
		{"several volumes add up", 10 << 30, 0, []Promise{{Size: 1 << 30}, {Size: 2 << 30, Allocated: 1 << 30}}, 8 << 30},
		{"overpromised reports zero, never negative", 1 << 30, 0, []Promise{{Size: 4 << 30}}, 0},
		{"reserve larger than free space", 1 << 30, 2 << 30, nil, 0},
	} {
		if got := PoolCapacity(c.free, c.reserve, c.promised); got != c.want {
			t.Errorf("%s: PoolCapacity = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestVolumeSize(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct {
		name            string
		required, limit int64
		want            int64
		err             string
	}{
		{"nothing asked gets the default", 0, 0, 1 << 30, ""},
		{"default capped by the limit", 0, 100 * mi, 100 * mi, ""},
		{"rounded up to a MiB", 10*mi + 1, 0, 11 * mi, ""},
		{"rounding never passes the limit", 10*mi + 1, 10*mi + 100, 10*mi + 1, ""},
		{"exact", 300 * mi, 300 * mi, 300 * mi, ""},
		{"required over limit", 20 * mi, 10 * mi, 0, "more than the limit"},
		{"negative", -1, 0, 0, "negative"},
	} {
		got, err := VolumeSize(c.required, c.limit, 1<<30)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: VolumeSize = %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

func TestSameVolume(t *testing.T) {
	have := VolumeRequest{Name: "pvc-1", Required: 100, Params: map[string]string{"backend": "loop"}}
	for _, c := range []struct {
		name string
		want VolumeRequest
		size int64
		why  string
	}{
		{"same request", VolumeRequest{Name: "pvc-1", Required: 100, Params: map[string]string{"backend": "loop"}}, 1 << 20, ""},
		{"an empty parameter is no parameter", VolumeRequest{Name: "pvc-1", Params: map[string]string{"backend": "loop", "x": ""}}, 1 << 20, ""},
		{"smaller request fits", VolumeRequest{Name: "pvc-1", Required: 10, Params: map[string]string{"backend": "loop"}}, 1 << 20, ""},
		{"larger request", VolumeRequest{Name: "pvc-1", Required: 2 << 20, Params: map[string]string{"backend": "loop"}}, 1 << 20, "requires"},
		{"limit under the size", VolumeRequest{Name: "pvc-1", Limit: 100, Params: map[string]string{"backend": "loop"}}, 1 << 20, "limit"},
		{"other parameter", VolumeRequest{Name: "pvc-1", Params: map[string]string{"backend": "loop", "filesystem.type": "xfs"}}, 1 << 20, "filesystem.type"},
		{"other access type", VolumeRequest{Name: "pvc-1", Block: true, Params: map[string]string{"backend": "loop"}}, 1 << 20, "block"},
		{"from a snapshot", VolumeRequest{Name: "pvc-1", Source: "snap/n1/s", Params: map[string]string{"backend": "loop"}}, 1 << 20, "provisioned from"},
		{"other name (a key collision)", VolumeRequest{Name: "pvc/1", Params: map[string]string{"backend": "loop"}}, 1 << 20, "name"},
	} {
		got := SameVolume(have, c.size, c.want)
		if (c.why == "") != (got == "") || !strings.Contains(got, c.why) {
			t.Errorf("%s: SameVolume = %q, want %q", c.name, got, c.why)
		}
	}
}

func TestMayDelete(t *testing.T) {
	for _, c := range []struct {
		name string
		use  Use
		why  string
	}{
		{"unused", Use{}, ""},
		{"staged", Use{Staged: true, Attached: true}, "staged"},
		{"teardown still running", Use{Attached: true}, "attached"},
		{"a manifest uses the image", Use{ClaimedBy: "data"}, "volume data"},
		{"an LV open outside volumed (mounted by hand)", Use{Open: true}, "open on this node"},
	} {
		got := MayDelete(c.use)
		if (c.why == "") != (got == "") || !strings.Contains(got, c.why) {
			t.Errorf("%s: MayDelete = %q, want %q", c.name, got, c.why)
		}
	}
}

func TestReachable(t *testing.T) {
	const key = "topology.volumed.io/node"
	for _, c := range []struct {
		name      string
		requisite []map[string]string
		want      bool
	}{
		{"no requirement", nil, true},
		{"this node", []map[string]string{{key: "n1"}}, true},
		{"one of several", []map[string]string{{key: "n2"}, {key: "n1"}}, true},
		{"another node", []map[string]string{{key: "n2"}}, false},
		{"another key only", []map[string]string{{"zone": "a"}}, false},
	} {
		if got := Reachable(key, "n1", c.requisite); got != c.want {
			t.Errorf("%s: Reachable = %v, want %v", c.name, got, c.want)
		}
	}
}

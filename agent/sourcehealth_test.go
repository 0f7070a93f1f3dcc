package agent

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// healthTarget is a fakeTarget whose source reports a health.
type healthTarget struct {
	*fakeTarget
	h   SourceHealth
	err error
	n   int
}

func (h *healthTarget) Health(context.Context, *Desired, store.Attachment) (SourceHealth, error) {
	h.n++
	return h.h, h.err
}

// The health check of a volume's source raises SourceDegraded with the
// source's words, shows its detail in the status and its gauges on the
// metrics endpoint, one series for two volumes on one pool; a failed
// check keeps the condition, and a healthy one clears it.
func TestSourceHealth(t *testing.T) {
	st, _, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pool := Gauge{Name: "volumed_lvm_thinpool_data_percent", Help: "h", Labels: [][2]string{{"volume_group", "vg0"}, {"thin_pool", "pool"}}, Value: 95}
	ht := &healthTarget{fakeTarget: &fakeTarget{}, h: SourceHealth{Detail: "LV vg0/a in VG vg0, thin in pool vg0/pool", Gauges: []Gauge{pool},
		Problem: &Problem{Reason: "ThinPoolFull", Message: "thin pool vg0/pool is 95.0% full (data)"}}}
	m := NewMetrics("test")
	a := New(Config{StateDir: t.TempDir(), Store: st, Attachers: map[string]Attacher{"fake": ht}, Mounter: &fakeMounter{}, Metrics: m})
	a.state = NewState(st, time.Now, nil)
	close(a.startedc)
	ds := map[string]*Desired{}
	for _, n := range []string{"a", "b"} {
		d := &Desired{Name: n, Kind: "fake", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4"}}}
		ds[n] = d
		stagedAt64Mi(t, a, d)
	}
	a.manifests.replace(ds, nil)
	ctx := context.Background()
	a.checkSources(ctx, a.desiredSnapshot(), a.state.Snapshot())

	v := statusOf(t, a, "a")
	c, ok := condition(v, CondSourceDegraded)
	if !ok || c.Reason != "ThinPoolFull" || !strings.Contains(c.Message, "95.0% full") || v.SourceDetail != ht.h.Detail {
		t.Fatalf("status after a check of a full pool: %+v; want SourceDegraded ThinPoolFull and the detail", v)
	}
	if got := poolSeries(t, m); len(got) != 1 || got[0] != `thin_pool="pool",volume_group="vg0" 95` {
		t.Errorf("series of the pool's gauge for two volumes on it: %q, want one, 95", got)
	}

	ht.err = errors.New("lvs: exit status 5")
	a.checkSources(ctx, a.desiredSnapshot(), a.state.Snapshot())
	if _, ok := condition(statusOf(t, a, "a"), CondSourceDegraded); !ok {
		t.Error("a failed check cleared the condition: want it kept")
	}
	if got := poolSeries(t, m); len(got) != 0 {
		t.Errorf("series after a failed check: %q, want none (a stale number looks live)", got)
	}

	ht.err, ht.h.Problem = nil, nil
	a.checkSources(ctx, a.desiredSnapshot(), a.state.Snapshot())
	if v := statusOf(t, a, "a"); len(v.Conditions) > 0 {
		t.Errorf("after a healthy check: conditions %+v, want none", v.Conditions)
	}
}

// poolSeries gathers volumed_lvm_thinpool_data_percent from the registry.
func poolSeries(t *testing.T, m *Metrics) []string {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fams {
		if f.GetName() != "volumed_lvm_thinpool_data_percent" {
			continue
		}
		for _, s := range f.GetMetric() {
			var ls []string
			for _, l := range s.GetLabel() {
				ls = append(ls, l.GetName()+"=\""+l.GetValue()+"\"")
			}
			out = append(out, strings.Join(ls, ",")+" "+strconv.FormatFloat(s.GetGauge().GetValue(), 'g', -1, 64))
		}
	}
	return out
}

// A disk unplugged that no volume holds may be a PV under a volume's
// LV (a raid1 leg): its uevent runs the health checks at once, so the
// volume shows SourceDegraded now, not at the next resync. A virtual
// device that goes (a dm mapping closed) runs none.
func TestAnUnpluggedDiskChecksTheSources(t *testing.T) {
	ht := &healthTarget{fakeTarget: &fakeTarget{}, h: SourceHealth{Detail: "LV vg0/m in VG vg0, raid1",
		Problem: &Problem{Reason: "PhysicalVolumeMissing", Message: "volume group vg0 is missing 1 physical volume(s)"}}}
	a := sessionAgent(t, nil)
	a.cfg.Attachers["fake"] = ht
	d := &Desired{Name: "m", Kind: "fake", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4"}}}
	stagedAt64Mi(t, a, d)
	a.manifests.replace(map[string]*Desired{"m": d}, nil)
	ctx := context.Background()
	a.wake(ctx, Wake{Reason: "block device removed: dm-7", Verify: true, Device: "dm-7"})
	if ht.n != 0 {
		t.Fatalf("a virtual device removed ran %d health checks, want none", ht.n)
	}
	if !a.wake(ctx, Wake{Reason: "block device removed: vdb", Verify: true, Device: "vdb", Unplugged: true}) {
		t.Error("the wake asks no pass after the health check")
	}
	if c, ok := condition(statusOf(t, a, "m"), CondSourceDegraded); !ok || c.Reason != "PhysicalVolumeMissing" {
		t.Errorf("after a disk no volume holds was unplugged: %+v, want SourceDegraded PhysicalVolumeMissing at once", statusOf(t, a, "m").Conditions)
	}
}

package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// A device size that cannot be read is said (once, not at every check)
// and grows nothing; it is never taken silently as 0.
func TestGrowthCheckShowsUnreadableSize(t *testing.T) {
	var buf syncBuffer
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.Log = slog.New(slog.NewTextHandler(&buf, nil))
	a.driftLog = newOnceLog(a.cfg.Log)
	a.cfg.FS = &fakeFS{sizeErr: errors.New("sysfs size: no such device")}
	d := &Desired{Name: "g", Kind: "fake", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4", Grow: true}}}
	rec := &store.Volume{Name: "g", Kind: "fake",
		Attachment: &store.Attachment{Kind: "fake", Device: "/dev/fake-g", Identity: "fake:g"},
		Staging:    &store.MountRecord{Path: "/s/g", Owned: true, DeviceBytes: 64 << 20, Options: decide.StagingOptions(d)}}
	desired, actual := map[string]*Desired{"g": d}, map[string]*store.Volume{"g": rec}
	for range 2 {
		a.askGrowthCheck()
		dec := decide.Decide(desired, actual, a.observe(context.Background(), desired, actual))
		if len(dec.Ops) != 0 {
			t.Fatalf("ops %+v with an unreadable size, want none", dec.Ops)
		}
	}
	if n := strings.Count(buf.String(), "no such device"); n != 1 {
		t.Fatalf("the size error was logged %d times over two checks, want once:\n%s", n, buf.String())
	}
}

// A size under the source's, for a kind that keeps its source's size
// (an LV), shows as GrowFailed (ShrinkRefused) naming the volume and both
// sizes, and nothing is grown; the size raised back clears it.
func TestShrinkRefusedShown(t *testing.T) {
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.FS, a.cfg.Mounter = &fakeFS{size: 64 << 20}, &fakeMounter{}
	d := &Desired{Name: "g", Kind: "fake", Caps: manifest.Caps{Size: 32 << 20, RefuseShrink: true},
		Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4", Grow: true}}}
	stagedAt64Mi(t, a, d)
	check := func() {
		t.Helper()
		desired := map[string]*Desired{"g": d}
		actual, versions := a.state.VersionedSnapshot()
		a.askGrowthCheck()
		dec := decide.Decide(desired, actual, a.observe(context.Background(), desired, actual))
		if len(dec.Ops) != 0 {
			t.Fatalf("ops %+v, want none", dec.Ops)
		}
		a.act(context.Background(), dec, desired, actual, versions)
	}
	check()
	v := statusOf(t, a, "g")
	c, ok := condition(v, CondGrowFailed)
	if v.Phase != api.PhaseDegraded || !ok || c.Reason != "ShrinkRefused" || !strings.Contains(c.Message, "volume g: the manifest asks for 33554432 bytes, its source has 67108864") {
		t.Fatalf("a smaller size: phase %s, conditions %+v; want Degraded, ShrinkRefused naming both sizes", v.Phase, v.Conditions)
	}
	d.Caps.Size = 64 << 20
	check()
	if v := statusOf(t, a, "g"); v.Phase != api.PhaseReady || len(v.Conditions) > 0 {
		t.Fatalf("the size raised back: phase %s, conditions %+v; want Ready", v.Phase, v.Conditions)
	}
}

// stagedAt64Mi records d as attached and mounted, its filesystem fitted
// to 64 MiB.
func stagedAt64Mi(t *testing.T, a *Agent, d *Desired) {
	t.Helper()
	a.manifests.replace(map[string]*Desired{d.Name: d}, nil)
	rec := &store.Volume{Name: d.Name, Kind: "fake",
		Attachment: &store.Attachment{Kind: "fake", Device: "/dev/fake-" + d.Name, Identity: "fake:" + d.Name},
		Staging:    &store.MountRecord{Path: "/s/" + d.Name, Owned: true, DeviceBytes: 64 << 20, Options: decide.StagingOptions(d)}}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}
}

// A mount records the filesystem's own size when it is smaller than the
// device's (the device grew, a power cut came before the filesystem
// grow): the growth check then owes it the grow. A filesystem that fills
// its device, or whose size is unknown, records the device's.
func TestFittedSizeIsTheFilesystems(t *testing.T) {
	a := sessionAgent(t, &fakeTarget{})
	ctx := context.Background()
	for _, c := range []struct{ dev, fs, want int64 }{
		{96 << 20, 64 << 20, 64 << 20},
		{96 << 20, 96 << 20, 96 << 20},
		{96 << 20, 0, 96 << 20},
	} {
		a.cfg.FS = &fakeFS{size: c.dev, fsBytes: c.fs}
		if got := a.fittedSize(ctx, "g", "/dev/fake-g"); got != c.want {
			t.Errorf("device %d, filesystem %d: fitted %d, want %d", c.dev, c.fs, got, c.want)
		}
	}
	d := &Desired{Name: "g", Kind: "fake", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4", Grow: true}}}
	rec := &store.Volume{Name: "g", Attachment: &store.Attachment{Device: "/dev/fake-g"}, Staging: &store.MountRecord{DeviceBytes: 64 << 20}}
	if !decide.GrowNeeded(d, rec, decide.Sizes{Device: 96 << 20, Image: -1}) {
		t.Error("a filesystem fitted to 64 MiB on a 96 MiB device is not grown")
	}
}

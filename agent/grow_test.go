package agent

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

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
		dec := decide.Decide(desired, actual, a.observe(desired, actual))
		if len(dec.Ops) != 0 {
			t.Fatalf("ops %+v with an unreadable size, want none", dec.Ops)
		}
	}
	if n := strings.Count(buf.String(), "no such device"); n != 1 {
		t.Fatalf("the size error was logged %d times over two checks, want once:\n%s", n, buf.String())
	}
}

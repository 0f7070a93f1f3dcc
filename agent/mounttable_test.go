package agent

import (
	"context"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/volumed/volumed/store"
)

// Propagation can tuck a mount underneath one already there: the table
// then lists the lower mount after the one on top of it. The drift check
// must judge the mount a lookup of the path lands on (the top of the
// stack, by parent links), or it forgets a staging mount that is there.
func TestDriftCheckJudgesTopOfStack(t *testing.T) {
	f := &fakeTarget{}
	a := sessionAgent(t, f)
	m := a.cfg.Mounter.(*fakeMounter)
	m.table = []*mountinfo.Info{
		{ID: 1, Parent: 1, Mountpoint: "/"},
		// ours, on top: its parent is the mount tucked under it
		{ID: 100, Parent: 200, Mountpoint: "/s/v", Major: 7, Minor: 1, Source: "/dev/fake-v"},
		{ID: 200, Parent: 1, Mountpoint: "/s/v", Major: 0, Minor: 50, Source: "tucked"},
	}
	rec := &store.Volume{Name: "v", Driver: "fake",
		Staging: &store.MountRecord{Path: "/s/v", Device: "/dev/fake-v", MountID: 100, Owned: true}}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}
	a.verify(context.Background())
	if got := a.state.Get("v"); got == nil || got.Staging == nil {
		t.Fatal("the drift check dropped the staging mount that is on top of the stack")
	}
}

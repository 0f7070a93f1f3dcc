package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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
	rec := &store.Volume{Name: "v", Kind: "fake",
		Staging: &store.MountRecord{Path: "/s/v", Device: "/dev/fake-v", MountID: 100, Owned: true}}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}
	a.verify(context.Background())
	if got := a.state.Get("v"); got == nil || got.Staging == nil {
		t.Fatal("the drift check dropped the staging mount that is on top of the stack")
	}
}

// hookedTarget is a fakeTarget whose Verify runs a hook first and
// answers what the test says.
type hookedTarget struct {
	*fakeTarget
	verify func() (string, bool, error)
}

func (h hookedTarget) Verify(context.Context, store.Attachment) (string, bool, error) {
	return h.verify()
}

// An operation that records while the drift check looks (here: from
// within the check's Verify) is newer than the check: the check's
// correction, made from the record it read before, must not undo it.
func TestDriftCheckNeverUndoesANewerRecord(t *testing.T) {
	a := sessionAgent(t, &fakeTarget{})
	rec := &store.Volume{Name: "v", Kind: "fake",
		Attachment: &store.Attachment{Kind: "fake", Device: "/dev/fake-v", Identity: "fake:v"}}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}
	a.cfg.Attachers["fake"] = hookedTarget{&fakeTarget{}, func() (string, bool, error) {
		// A publish finishing: the volume's record moves on.
		err := a.state.Do("v", "fake", OpPublish, nil, func(rec *store.Volume) error {
			rec.Targets = append(rec.Targets, store.MountRecord{Path: "/t", MountID: 9, Owned: true})
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		return "", false, nil
	}}
	a.cfg.Mounter.(*fakeMounter).table = []*mountinfo.Info{{ID: 1, Parent: 1, Mountpoint: "/"}, {ID: 9, Parent: 1, Mountpoint: "/t"}}
	a.verify(context.Background())
	got := a.state.Get("v")
	if got == nil || len(got.Targets) != 1 || got.Attachment == nil {
		t.Fatalf("after the drift check: %+v; want the record the publish left (attachment and target /t)", got)
	}
}

// A Verify that fails is said once, not at every resync, and the record
// is kept (unknown is not gone).
func TestDriftCheckLogsVerifyFailureOnce(t *testing.T) {
	var buf syncBuffer
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.Log = slog.New(slog.NewTextHandler(&buf, nil))
	a.driftLog = newOnceLog(a.cfg.Log)
	rec := &store.Volume{Name: "v", Kind: "fake",
		Attachment: &store.Attachment{Kind: "fake", Device: "/dev/fake-v", Identity: "fake:v"}}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}
	verr := errors.New("sysfs: no such file")
	a.cfg.Attachers["fake"] = hookedTarget{&fakeTarget{}, func() (string, bool, error) { return "", false, verr }}
	for range 3 {
		a.verify(context.Background())
	}
	if n := strings.Count(buf.String(), "sysfs: no such file"); n != 1 {
		t.Fatalf("the Verify error was logged %d times over three resyncs, want once:\n%s", n, buf.String())
	}
	if got := a.state.Get("v"); got == nil || got.Attachment == nil {
		t.Fatal("a Verify that failed dropped the attachment's record")
	}
	verr = errors.New("sysfs: permission denied")
	a.verify(context.Background())
	if !strings.Contains(buf.String(), "permission denied") {
		t.Fatal("a different Verify error was not logged")
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

package agent

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// fakeTarget stands in for one network target: a session the volumes on
// it share, which Detach releases only when no sharer is left (as the
// nvme and iscsi adapters do).
type fakeTarget struct {
	mu          sync.Mutex
	connected   bool
	connects    int
	disconnects int
}

func (f *fakeTarget) found(d *Desired, made bool) Found {
	return Found{Device: "/dev/fake-" + d.Name, Identity: "fake:" + d.Name, Session: "t", Owned: made, Reusable: true}
}

func (f *fakeTarget) Find(_ context.Context, d *Desired) ([]Found, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.connected {
		return nil, nil
	}
	return []Found{f.found(d, false)}, nil
}

func (f *fakeTarget) Attach(_ context.Context, d *Desired) (Found, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	made := !f.connected
	if made {
		f.connected = true
		f.connects++
	}
	return f.found(d, made), nil
}

func (f *fakeTarget) Verify(context.Context, store.Attachment) (string, bool, error) {
	return "", true, nil
}

// Detach tears down whenever called, as the real adapters do: whether a
// shared session may go is the core's call (decide.MayRelease), which the tests
// check.
func (f *fakeTarget) Detach(context.Context, store.Attachment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.connected {
		f.connected = false
		f.disconnects++
	}
	return nil
}

func sessionAgent(t *testing.T, f *fakeTarget) *Agent {
	t.Helper()
	st, _, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a := New(Config{StateDir: t.TempDir(), Store: st, Attachers: map[string]Attacher{"fake": f}, Mounter: &fakeMounter{}})
	a.state = NewState(st, time.Now, nil)
	close(a.startedc) // as Run does once the state is reconstructed
	return a
}

func netVolume(name string) *Desired {
	return &Desired{Name: name, Kind: "fake", Spec: &manifest.VolumeSpec{}}
}

// Two volumes on one session, whichever order they attach in and
// whatever their records say about who made it: the session is made
// once and released by the last volume to go, never left behind.
func TestSharedSessionReleasedByLastVolume(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// raced: b's record says "not owned", as when b reused the
		// session before a's record of making it was visible.
		raced      bool
		firstToGo  string
		secondToGo string
	}{
		{"maker goes first", false, "a", "b"},
		{"joiner goes first", false, "b", "a"},
		{"raced record, maker goes first", true, "a", "b"},
		{"raced record, joiner goes first", true, "b", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTarget{}
			a := sessionAgent(t, f)
			if err := a.opAttach(ctx, netVolume("a")); err != nil {
				t.Fatal(err)
			}
			if err := a.opAttach(ctx, netVolume("b")); err != nil {
				t.Fatal(err)
			}
			if tc.raced {
				rec := a.state.Get("b")
				rec.Attachment.Owned = false
				if err := a.state.Adopt(rec); err != nil {
					t.Fatal(err)
				}
			}
			if f.connects != 1 {
				t.Fatalf("%d connects, want 1", f.connects)
			}
			if err := a.opDetach(ctx, tc.firstToGo, "fake"); err != nil {
				t.Fatal(err)
			}
			if f.disconnects != 0 {
				t.Fatal("the session was released while a volume still used it")
			}
			if err := a.opDetach(ctx, tc.secondToGo, "fake"); err != nil {
				t.Fatal(err)
			}
			if f.disconnects != 1 || f.connected {
				t.Fatalf("after the last volume went: %d disconnects, connected %v; want the session released", f.disconnects, f.connected)
			}
		})
	}
}

// A session that was there before volumed (another tool's, the
// firmware's) is used but never released.
func TestForeignSessionNeverReleased(t *testing.T) {
	ctx := context.Background()
	f := &fakeTarget{connected: true}
	a := sessionAgent(t, f)
	if err := a.opAttach(ctx, netVolume("a")); err != nil {
		t.Fatal(err)
	}
	if rec := a.state.Get("a"); rec.Attachment.Owned {
		t.Fatal("a session found in place was recorded as ours")
	}
	if err := a.opDetach(ctx, "a", "fake"); err != nil {
		t.Fatal(err)
	}
	if f.disconnects != 0 || !f.connected {
		t.Fatal("a session volumed did not make was released")
	}
}

// Start-up owns what it finds by the rule an attach owns by
// (decide.Owns): a volume found on a session another volume's record
// says volumed made owns its share, so that the last of them to go
// logs it out (start-up used to record it as someone else's, and the
// session leaked once its maker was gone).
func TestFoundOnOurSessionIsOwned(t *testing.T) {
	ctx := context.Background()
	f := &fakeTarget{connected: true}
	a := sessionAgent(t, f)
	maker := &store.Volume{Name: "a", Kind: "fake",
		Attachment: &store.Attachment{Kind: "fake", Device: "/dev/fake-a", Identity: "fake:a", Session: "t", Owned: true}}
	if err := a.cfg.Store.Put(maker); err != nil {
		t.Fatal(err)
	}
	a.manifests.replace(map[string]*Desired{"a": netVolume("a"), "b": netVolume("b")}, nil)
	if err := a.reconstruct(ctx); err != nil {
		t.Fatal(err)
	}
	rec := a.state.Get("b")
	if rec == nil || rec.Attachment == nil {
		t.Fatalf("b after the restart: %+v, want its attachment adopted", rec)
	}
	if !rec.Attachment.Owned {
		t.Error("b's share of volumed's session was adopted as another tool's")
	}
}

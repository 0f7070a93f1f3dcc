package store

// What a transaction leaves on disk: records and intents across reopens, deletes, and writes after Close.

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestRoundTripAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "state.db")
	s := mustOpen(t, path, testOpts())

	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("state dir mode = %o, want 700", perm)
	}

	a, b := sampleVolume("a"), sampleVolume("b")
	b.UpdatedAt = time.Time{} // the store stamps a zero time
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(b); err != nil {
		t.Fatal(err)
	}
	id1, err := s.Begin(Intent{Volume: "a", Op: "publish", Inputs: map[string]string{"target": "/srv/a"}})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := s.Begin(Intent{Volume: "b", Op: "detach", StartedAt: testNow.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if id2 <= id1 {
		t.Errorf("intent ids not increasing: %d then %d", id1, id2)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path, testOpts())
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	wantB := *b
	wantB.UpdatedAt = testNow
	want := map[string]*Volume{"a": a, "b": &wantB}
	if !reflect.DeepEqual(vols, want) {
		t.Errorf("volumes after reopen:\n got %+v\nwant %+v", vols, want)
	}
	wantIntents := []Intent{
		{ID: id1, Volume: "a", Op: "publish", Inputs: map[string]string{"target": "/srv/a"}, StartedAt: testNow},
		{ID: id2, Volume: "b", Op: "detach", StartedAt: testNow.Add(time.Minute)},
	}
	if !reflect.DeepEqual(intents, wantIntents) {
		t.Errorf("intents after reopen:\n got %+v\nwant %+v", intents, wantIntents)
	}

	// Sequence numbers survive a reopen, so an old leftover intent is never overwritten.
	id3, err := s.Begin(Intent{Volume: "a", Op: "grow"})
	if err != nil {
		t.Fatal(err)
	}
	if id3 <= id2 {
		t.Errorf("intent id after reopen %d, want > %d", id3, id2)
	}
}

func TestFinishIsOneDurableTransaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := mustOpen(t, path, testOpts())
	id, err := s.Begin(Intent{Volume: "v", Op: "attach"})
	if err != nil {
		t.Fatal(err)
	}
	_, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(intents) != 1 || intents[0].ID != id || intents[0].Op != "attach" {
		t.Fatalf("after Begin, intents = %+v", intents)
	}

	before := s.Commits()
	v := sampleVolume("v")
	if err := s.Finish(id, "v", v); err != nil {
		t.Fatal(err)
	}
	if got := s.Commits() - before; got != 1 {
		t.Errorf("Finish took %d commits, want 1", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, testOpts())
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(intents) != 0 {
		t.Errorf("intent still present after Finish: %+v", intents)
	}
	if !reflect.DeepEqual(vols["v"], v) {
		t.Errorf("record after Finish = %+v, want %+v", vols["v"], v)
	}
}

func TestFinishNilDeletesRecord(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
	if err := s.Put(sampleVolume("gone")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(sampleVolume("kept")); err != nil {
		t.Fatal(err)
	}
	id, err := s.Begin(Intent{Volume: "gone", Op: "detach"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(id, "gone", nil); err != nil {
		t.Fatal(err)
	}
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := vols["gone"]; ok || len(vols) != 1 || vols["kept"] == nil {
		t.Errorf("after Finish(nil) volumes = %v, want only kept", vols)
	}
	if len(intents) != 0 {
		t.Errorf("intents = %+v, want none", intents)
	}
}

func TestDeleteAndDropIntent(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
	if err := s.Put(sampleVolume("v")); err != nil {
		t.Fatal(err)
	}
	id, err := s.Begin(Intent{Volume: "v", Op: "mount_device"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DropIntent(id); err != nil {
		t.Fatal(err)
	}
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(intents) != 0 || vols["v"] == nil {
		t.Fatalf("after DropIntent: vols %v intents %+v; want record kept, intent gone", vols, intents)
	}
	if err := s.Delete("v"); err != nil {
		t.Fatal(err)
	}
	if vols, _, _ = s.Load(); len(vols) != 0 {
		t.Errorf("after Delete: vols %v", vols)
	}
}

func TestWritesAfterCloseFail(t *testing.T) {
	s, _, err := Open(filepath.Join(t.TempDir(), "state.db"), testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(Intent{Volume: "v", Op: "attach"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Begin after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

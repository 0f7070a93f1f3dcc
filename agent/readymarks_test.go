package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func marksIn(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

func wantMarks(t *testing.T, dir string, want ...string) {
	t.Helper()
	got := marksIn(t, dir)
	if len(got) != len(want) {
		t.Fatalf("marks %v, want %v", got, want)
	}
	for _, n := range want {
		if !got[n] {
			t.Fatalf("marks %v, want %v", got, want)
		}
	}
}

// A start removes what a killed agent left; a sync marks and unmarks; a
// mark taken away by a running operation stays away until it ends.
func TestReadyMarks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ready")
	if err := os.MkdirAll(filepath.Join(dir, "odd-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ghost", "a"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := newReadyMarks(dir)
	if err := m.reset(); err != nil {
		t.Fatal(err)
	}
	wantMarks(t, dir)
	if err := m.sync(map[string]bool{"a": true, "b": false, "c": true}, false); err != nil {
		t.Fatal(err)
	}
	wantMarks(t, dir, "a", "c")
	release, err := m.hold("a")
	if err != nil {
		t.Fatal(err)
	}
	wantMarks(t, dir, "c")
	// A phase read before the operation started says usable: no mark
	// while it runs.
	if err := m.sync(map[string]bool{"a": true}, false); err != nil {
		t.Fatal(err)
	}
	wantMarks(t, dir, "c")
	release()
	if err := m.sync(map[string]bool{"a": true, "c": false}, false); err != nil {
		t.Fatal(err)
	}
	wantMarks(t, dir, "a")
	// A pass over every volume removes the marks of those it did not name.
	if err := m.sync(map[string]bool{"d": true}, true); err != nil {
		t.Fatal(err)
	}
	wantMarks(t, dir, "d")
	if err := m.reset(); err != nil {
		t.Fatal(err)
	}
	wantMarks(t, dir)
	// No dir: nothing kept, nothing fails.
	none := newReadyMarks("")
	if err := none.sync(map[string]bool{"a": true}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := none.hold("a"); err != nil {
		t.Fatal(err)
	}
}

// An operation that takes a volume out of use runs only once its mark is
// gone; one that leaves it in use (a recovery key) keeps it; one whose
// mark cannot be removed does not run.
func TestOperationRemovesReadyMarkFirst(t *testing.T) {
	ctx := context.Background()
	a := sessionAgent(t, &fakeTarget{})
	dir := filepath.Join(t.TempDir(), "ready")
	a.ready = newReadyMarks(dir)
	if err := a.ready.reset(); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(dir, "a")
	for _, op := range []string{OpUnpublish, OpUnmountDevice, OpDetach, OpClose, OpGrow, OpRemount, OpRecoveryKey} {
		if err := a.ready.sync(map[string]bool{"a": true}, false); err != nil {
			t.Fatal(err)
		}
		ran := false
		err := a.run(ctx, "a", "fake", op, func(context.Context) error {
			ran = true
			_, err := os.Stat(mark)
			if keep := op == OpRecoveryKey; keep != (err == nil) {
				t.Errorf("%s: mark there %v while it runs, want %v", op, err == nil, keep)
			}
			return nil
		})
		if err != nil || !ran {
			t.Fatalf("%s: ran %v, %v", op, ran, err)
		}
		// Taken away for the operation, the mark comes back only from a
		// pass's sync.
		a.ready.marked = map[string]bool{}
		_ = os.Remove(mark)
	}
	// A mark that cannot be removed (here a directory with a file in it).
	if err := os.MkdirAll(filepath.Join(mark, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := a.run(ctx, "a", "fake", OpUnpublish, func(context.Context) error {
		t.Error("unpublish ran with the mark in place")
		return nil
	})
	if err == nil || errors.Is(err, errRetryNow) {
		t.Errorf("unpublish with a mark that stays: %v, want an error", err)
	}
}

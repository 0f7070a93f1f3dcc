package store

import (
	"path/filepath"
	"testing"
)

// The first Load after Open hands out what Open's schema check decoded,
// unless something was written since: then it reads the file, and what
// was written is in it.
func TestFirstLoadIsTheFileAsOpened(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := mustOpen(t, path, testOpts())
	for _, n := range []string{"a", "b"} {
		if err := s.Put(&Volume{Name: n, Kind: "loop"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Begin(Intent{Volume: "a", Op: "attach"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path, testOpts())
	vols, intents, err := s.Load()
	if err != nil || len(vols) != 2 || vols["a"] == nil || len(intents) != 1 || intents[0].Volume != "a" {
		t.Fatalf("first Load: %v, %d intents, err %v; want a and b and a's intent", vols, len(intents), err)
	}
	vols["a"].Kind = "changed by the caller"
	if again, _, _ := s.Load(); again["a"] == nil || again["a"].Kind != "loop" {
		t.Errorf("a second Load: %+v, want the file's a", again["a"])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path, testOpts())
	defer s.Close()
	if err := s.Delete("b"); err != nil {
		t.Fatal(err)
	}
	if vols, _, err := s.Load(); err != nil || len(vols) != 1 || vols["b"] != nil {
		t.Errorf("Load after a write: %v (err %v), want a alone", vols, err)
	}
}

package store

import (
	"path/filepath"
	"testing"
)

// The last attachment of a volume outlives its record, and a snapshot
// reads it while the file is held open (locked) by a Store.
func TestFormerOutlivesTheRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, _, err := Open(path, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := &Attachment{Kind: "disk", Device: "/dev/loop3", Identity: "disk:path:/dev/loop3"}
	if err := s.Put(&Volume{Name: "data", Attachment: at}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("data"); err != nil {
		t.Fatal(err)
	}
	snap, err := ReadSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Volumes["data"]; ok {
		t.Errorf("the deleted record is still read: %+v", snap.Volumes)
	}
	if f, ok := snap.Former["data"]; !ok || f.Attachment.Device != "/dev/loop3" || f.Attachment.Identity != at.Identity {
		t.Errorf("former data = %+v, %v; want %+v", f, ok, at)
	}
}

package durable

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesAndLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rec.json")
	for _, content := range []string{"one", "two, longer"} {
		if err := WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read %q (%v), want %q", got, err, content)
		}
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(ents))
	}
}

func TestWriteFileFailureRemovesItsTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub") // a directory: the rename over it fails
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("x"), 0o600); err == nil {
		t.Fatal("renamed a file over a non-empty directory")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries after a failed write, want the one it had", len(ents))
	}
}

func TestSyncDirNamesAMissingDirectory(t *testing.T) {
	err := SyncDir(filepath.Join(t.TempDir(), "gone"))
	if !os.IsNotExist(err) {
		t.Fatalf("SyncDir of a missing directory: %v, want a not-exist error", err)
	}
}

// The temporary file is made where the caller says, and nothing is left
// there or beside the file.
func TestWriteFileViaAnotherDirectory(t *testing.T) {
	tmpDir := t.TempDir()
	dir := filepath.Join(tmpDir, "portal")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "default")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileVia(tmpDir, p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if fi, serr := os.Stat(p); err != nil || string(got) != "new" || serr != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("read %q (%v), want \"new\" of mode 0600", got, err)
	}
	for d, want := range map[string]int{tmpDir: 1, dir: 1} {
		if ents, _ := os.ReadDir(d); len(ents) != want {
			t.Errorf("%s holds %d entries, want %d", d, len(ents), want)
		}
	}
	// A failed rename leaves nothing in the temporary directory.
	if err := WriteFileVia(tmpDir, dir, []byte("x"), 0o600); err == nil {
		t.Fatal("renamed a file over a non-empty directory")
	}
	if ents, _ := os.ReadDir(tmpDir); len(ents) != 1 {
		t.Errorf("%s holds %d entries after a failed write, want 1", tmpDir, len(ents))
	}
}

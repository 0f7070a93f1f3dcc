package csi

import (
	"os"
	"path/filepath"
	"testing"
)

// Only what volumed makes at a target goes: an empty directory, or for a
// raw block volume an empty file.
func TestRemoveMadeTarget(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, fn func(p string) error) string {
		p := filepath.Join(dir, name)
		if err := fn(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	emptyDir := mk("empty", func(p string) error { return os.Mkdir(p, 0o750) })
	fullDir := mk("full", func(p string) error {
		if err := os.Mkdir(p, 0o750); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(p, "x"), nil, 0o600)
	})
	data := mk("data", func(p string) error { return os.WriteFile(p, []byte("bytes"), 0o600) })
	emptyFile := mk("emptyfile", func(p string) error { return os.WriteFile(p, nil, 0o600) })
	link := mk("link", func(p string) error { return os.Symlink(emptyDir, p) })
	sub := mk("real", func(p string) error { return os.MkdirAll(filepath.Join(p, "sub"), 0o750) })
	viaLink := mk("via", func(p string) error { return os.Symlink(sub, p) })
	for _, c := range []struct {
		p     string
		block bool
		gone  bool
	}{
		{fullDir, false, false},
		{data, true, false},
		{emptyFile, false, false}, // a file at a filesystem volume's target is not volumed's
		{link, false, false},
		{filepath.Join(viaLink, "sub"), false, false},
		{filepath.Join(dir, "missing"), false, false},
		{emptyFile, true, true},
		{emptyDir, false, true},
	} {
		if err := removeMadeTarget(c.p, c.block); err != nil {
			t.Errorf("%s: %v", c.p, err)
		}
		if filepath.Base(c.p) == "missing" {
			continue
		}
		if _, err := os.Lstat(c.p); os.IsNotExist(err) != c.gone {
			t.Errorf("%s (block %v): removed %v, want %v", c.p, c.block, os.IsNotExist(err), c.gone)
		}
	}
	if _, err := os.Stat(filepath.Join(sub, "sub")); err != nil {
		t.Errorf("a directory reached through a symlink was removed: %v", err)
	}
	if b, err := os.ReadFile(data); err != nil || string(b) != "bytes" {
		t.Errorf("the file with bytes: %q, %v", b, err)
	}
}

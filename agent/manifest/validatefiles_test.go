package manifest_test

import (
	"path/filepath"
	"slices"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
)

func TestValidatePaths(t *testing.T) {
	root := t.TempDir()
	dir := mkdir(t, root, "d")
	write(t, dir, "a.yaml", loopVolume("a", "/img/a.img", "/srv/a"))
	write(t, dir, "notes.txt", "not a manifest")
	symlink(t, "/dev/null", filepath.Join(dir, "masked.yaml"))
	other := write(t, root, "other.conf", loopVolume("b", "/img/a.img"))
	json := write(t, root, "c.json", `{"apiVersion": "volumed/v1", "kind": "Mount", "metadata": {"name": "c"}, "spec": {"volume": "x", "path": "/srv/a"}}`)

	got := rel(root, Validate([]string{dir, other, json, filepath.Join(root, "nope")}, testOpts))
	want := []string{
		"nope: cannot read: no such file or directory",
		`other.conf:6:25: spec.source.loop.file: loop file /img/a.img is already used by Volume "a" (d/a.yaml:1)`,
		`c.json:1:106: spec.path: target /srv/a is already used by Volume "a" (d/a.yaml:1)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("Validate:\n got %q\nwant %q", got, want)
	}
	if probs := Validate([]string{filepath.Join(dir, "a.yaml")}, testOpts); len(probs) != 0 {
		t.Errorf("a good file: %q", rel(root, probs))
	}
}

package agent

import (
	"testing"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
)

// The filesystem registry's other names for a type reach the pure
// decisions through the Desired NewDesired makes: an ext3 filesystem on
// an ext4 volume is kept, on an xfs volume refused (never formatted).
func TestNewDesiredCarriesFilesystemNames(t *testing.T) {
	ext3 := []Signature{{Type: "ext3", Usage: "filesystem", Offset: 1080}}
	for _, c := range []struct {
		fstype string
		keep   bool
	}{{"ext4", true}, {"xfs", false}} {
		spec := &manifest.VolumeSpec{Source: manifest.Source{Kind: "loop"}, Filesystem: &manifest.Filesystem{Type: c.fstype, Format: manifest.FormatIfBlank}}
		d := NewDesired("v", "/m.yaml", spec, false, nil)
		mkfs, _, err := decide.Mkfs(false, ext3, d, false)
		if mkfs {
			t.Errorf("%s volume: ext3 found, yet mkfs decided", c.fstype)
		}
		if kept := err == nil; kept != c.keep {
			t.Errorf("%s volume: ext3 found: kept %v (err %v), want kept %v", c.fstype, kept, err, c.keep)
		}
	}
}

// A desired entry keeps the last read's Generation only when it is made
// of the very same spec and targets: a Mount that moved, or a spec parsed
// anew, gets its own, which resets the volume's backoff and marks it.
func TestGenerationKeptOnlyForTheSameSpecAndTargets(t *testing.T) {
	spec := &manifest.VolumeSpec{Source: manifest.Source{Kind: "loop"}, Filesystem: &manifest.Filesystem{Type: "ext4"}}
	read := func(spec *manifest.VolumeSpec, mountAt string) *manifest.Result {
		return &manifest.Result{
			Volumes: []*manifest.Object{{Kind: manifest.KindVolume, Metadata: manifest.Metadata{Name: "a"}, Volume: spec, File: "a.yaml"}},
			Mounts:  []*manifest.Object{{Kind: manifest.KindMount, Metadata: manifest.Metadata{Name: "m"}, Mount: &manifest.MountSpec{Volume: "a", Path: mountAt}, File: "m.yaml"}},
		}
	}
	fresh := func(d *Desired) string { c := *d; return Generation(&c) }
	first := buildDesired(read(spec, "/x"), nil)
	moved := buildDesired(read(spec, "/y"), first)
	again := buildDesired(read(spec, "/y"), moved)
	xfs := &manifest.VolumeSpec{Source: spec.Source, Filesystem: &manifest.Filesystem{Type: "xfs"}}
	edited := buildDesired(read(xfs, "/y"), again)
	for name, m := range map[string]map[string]*Desired{"first": first, "moved": moved, "again": again, "edited": edited} {
		if got, want := m["a"].Generation, fresh(m["a"]); got != want {
			t.Errorf("%s read: generation %s, computed afresh %s", name, got, want)
		}
	}
	if moved["a"].Generation == first["a"].Generation || edited["a"].Generation == again["a"].Generation {
		t.Error("a moved Mount or an edited spec kept the last generation")
	}
	if again["a"].Generation != moved["a"].Generation {
		t.Error("the same spec and targets read again got another generation")
	}
}

// A volume read again from the very same object, with no Mount naming
// it, keeps its entry itself; a Mount that names it makes a new one.
func TestDesiredEntryKeptForTheSameObject(t *testing.T) {
	vol := &manifest.Object{Kind: manifest.KindVolume, Metadata: manifest.Metadata{Name: "a"}, File: "a.yaml",
		Volume: &manifest.VolumeSpec{Source: manifest.Source{Kind: "loop"}, Filesystem: &manifest.Filesystem{Type: "ext4"}, Mounts: []manifest.Target{{Path: "/srv/a"}}}}
	first := buildDesired(&manifest.Result{Volumes: []*manifest.Object{vol}}, nil)
	again := buildDesired(&manifest.Result{Volumes: []*manifest.Object{vol}}, first)
	if again["a"] != first["a"] {
		t.Error("the same object read again got a new entry")
	}
	mount := &manifest.Object{Kind: manifest.KindMount, Metadata: manifest.Metadata{Name: "m"}, File: "m.yaml", Mount: &manifest.MountSpec{Volume: "a", Path: "/srv/m"}}
	mounted := buildDesired(&manifest.Result{Volumes: []*manifest.Object{vol}, Mounts: []*manifest.Object{mount}}, again)
	if mounted["a"] == again["a"] || len(mounted["a"].Targets) != 2 {
		t.Errorf("a Mount naming the volume: entry kept %v, targets %+v", mounted["a"] == again["a"], mounted["a"].Targets)
	}
	unmounted := buildDesired(&manifest.Result{Volumes: []*manifest.Object{vol}}, mounted)
	if unmounted["a"] == mounted["a"] || len(unmounted["a"].Targets) != 1 || unmounted["a"].Generation != first["a"].Generation {
		t.Errorf("the Mount gone: targets %+v, generation %s (first %s)", unmounted["a"].Targets, unmounted["a"].Generation, first["a"].Generation)
	}
}

package csi

import (
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
)

// sizedKind is a kind agent/csi has never heard of whose size is in a
// field of another name: it is grown by its Caps.SizeField alone.
type sizedKind struct{}

type sizedSpec struct {
	Name     string `yaml:"name"`
	Capacity string `yaml:"capacity"`
}

func (sizedKind) Name() string { return "sized" }
func (sizedKind) Staged() bool { return false }
func (sizedKind) New() any     { return &sizedSpec{} }
func (sizedKind) Check(spec any, c *manifest.Check) manifest.Caps {
	s := spec.(*sizedSpec)
	caps := manifest.Caps{Key: "sized " + s.Name}
	if s.Capacity != "" {
		caps.Size, caps.SizeField = c.Size("capacity", s.Capacity), "capacity"
	}
	return caps
}

// An expansion (CapacityBytes) grows a source whose kind keeps its size,
// whatever the field that holds it; it never shrinks one, and a kind
// that keeps no size is left as its context says.
func TestDesiredExpansion(t *testing.T) {
	o := opts()
	o.Kinds = append(kinds.Manifest(kinds.All()), sizedKind{})
	cases := []struct {
		name     string
		ctx      map[string]string
		capacity int64
		want     int64 // Caps.Size
	}{
		{"loop image grown", map[string]string{"loop.file": "/i/a.img", "loop.create.size": "1Gi"}, 2 << 30, 2 << 30},
		{"loop image not expanded", map[string]string{"loop.file": "/i/a.img", "loop.create.size": "1Gi"}, 0, 1 << 30},
		{"loop image never shrunk", map[string]string{"loop.file": "/i/a.img", "loop.create.size": "1Gi"}, 1 << 20, 1 << 30},
		{"loop image the kind does not create: no size", map[string]string{"loop.file": "/i/a.img"}, 2 << 30, 0},
		{"a new kind's size field grown", map[string]string{"sized.name": "x", "sized.capacity": "64Mi"}, 128 << 20, 128 << 20},
		{"a new kind with no size", map[string]string{"sized.name": "x"}, 128 << 20, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &Record{VolumeID: "pv-1", StagingPath: "/k/g", Context: c.ctx, CapacityBytes: c.capacity}
			d, err := desired(VolumeName(r.VolumeID), r, o)
			if err != nil {
				t.Fatal(err)
			}
			if d.Caps.Size != c.want {
				t.Errorf("size %d, want %d", d.Caps.Size, c.want)
			}
		})
	}
}

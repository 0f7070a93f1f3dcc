package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"slices"
	"sort"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/filesystem"
)

// buildDesired turns the accepted manifest objects into the desired state.
// An entry made of the very spec (a file the Load did not decode again)
// and the same targets as in prev keeps prev's Generation: encoding and
// hashing every volume's spec at each Load was a share of what one
// manifest edit cost among a thousand (docs/performance.md).
func buildDesired(res *manifest.Result, prev map[string]*Desired) map[string]*Desired {
	out := make(map[string]*Desired, len(res.Volumes))
	for _, o := range res.Volumes {
		spec := o.Volume
		var targets []DesiredTarget
		for _, m := range spec.Mounts {
			targets = append(targets, DesiredTarget{Path: m.Path, ReadOnly: m.ReadOnly, NestedIn: m.NestedIn, AllowNonEmpty: m.AllowNonEmpty, Block: m.Block, From: "Volume/" + o.Metadata.Name})
		}
		d := NewDesired(o.Metadata.Name, o.File, spec, IsRawBlock(spec), targets)
		d.Absent = spec.State == "absent"
		out[d.Name] = d
	}
	for _, o := range res.Mounts {
		m := o.Mount
		d := out[m.Volume]
		if d == nil {
			continue // waits for its volume; the loader reported it
		}
		d.Targets = append(d.Targets, DesiredTarget{Path: path.Clean(m.Path), ReadOnly: m.ReadOnly, SubPath: m.SubPath, NestedIn: m.NestedIn, AllowNonEmpty: m.AllowNonEmpty, From: "Mount/" + o.Metadata.Name})
	}
	for _, d := range out {
		sortTargets(d.Targets)
		if p := prev[d.Name]; p != nil && p.Spec == d.Spec && p.StagingPath == d.StagingPath && slices.Equal(p.Targets, d.Targets) {
			d.Generation = p.Generation
		} else {
			d.Generation = Generation(d)
		}
	}
	return out
}

// NewDesired is the one place a volume's desired state is made from its
// spec, for a manifest (buildDesired) and for a CSI record (agent/csi):
// its kind and capabilities from the source, its targets' paths clean
// and in order. file names where it comes from ("csi:ID" for CSI).
func NewDesired(name, file string, spec *manifest.VolumeSpec, block bool, targets []DesiredTarget) *Desired {
	d := &Desired{Name: name, Kind: spec.Source.Kind, File: file, Spec: spec, Caps: spec.Source.Caps, Block: block}
	if spec.Filesystem != nil {
		if t, ok := filesystem.Lookup(spec.Filesystem.Type); ok {
			d.FSAlso = t.Also
		}
	}
	for _, t := range targets {
		t.Path = path.Clean(t.Path)
		d.Targets = append(d.Targets, t)
	}
	sortTargets(d.Targets)
	return d
}

func sortTargets(ts []DesiredTarget) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Path < ts[j].Path })
}

// IsRawBlock: a block source with no filesystem block, published as the
// device node itself.
func IsRawBlock(spec *manifest.VolumeSpec) bool {
	return spec.Filesystem == nil && !spec.Source.Staged
}

// Generation is the hash that changes whenever anything about d that
// the reconciler acts on changes.
func Generation(d *Desired) string {
	b, _ := json.Marshal(struct {
		Spec        *manifest.VolumeSpec
		Targets     []DesiredTarget
		StagingPath string `json:",omitempty"`
	}{d.Spec, d.Targets, d.StagingPath})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

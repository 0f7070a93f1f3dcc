package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"sort"

	"github.com/volumed/volumed/agent/manifest"
)

// buildDesired turns the accepted manifest objects into the desired state.
func buildDesired(res *manifest.Result) map[string]*Desired {
	out := make(map[string]*Desired, len(res.Volumes))
	for _, o := range res.Volumes {
		spec := o.Volume
		d := &Desired{
			Name:   o.Metadata.Name,
			Driver: spec.Source.Driver(),
			File:   o.File,
			Spec:   spec,
			Caps:   spec.Source.Caps,
			Absent: spec.State == "absent",
			Block:  IsRawBlock(spec),
		}
		for _, m := range spec.Mounts {
			d.Targets = append(d.Targets, DesiredTarget{Path: path.Clean(m.Path), ReadOnly: m.ReadOnly, NestedIn: m.NestedIn, AllowNonEmpty: m.AllowNonEmpty, Block: m.Block, From: "Volume/" + d.Name})
		}
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
		sort.Slice(d.Targets, func(i, j int) bool { return d.Targets[i].Path < d.Targets[j].Path })
		d.Generation = Generation(d)
	}
	return out
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

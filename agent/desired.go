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
// A volume made of the very Volume object of prev's entry, with no Mount
// naming it, is prev's entry itself: building each volume's entry again
// at each Load was a share of what one manifest edit cost among a
// thousand (docs/performance.md). An entry made of the very spec (a file
// the Load did not decode again) and the same targets as in prev keeps
// prev's Generation, for the same reason: its encoding and hash.
func buildDesired(res *manifest.Result, prev map[string]*Desired) map[string]*Desired {
	mountsOf := map[string][]*manifest.Object{}
	for _, o := range res.Mounts {
		mountsOf[o.Mount.Volume] = append(mountsOf[o.Mount.Volume], o)
	}
	out := make(map[string]*Desired, len(res.Volumes))
	for _, o := range res.Volumes {
		name := o.Metadata.Name
		if p := prev[name]; p != nil && p.Spec == o.Volume && p.File == o.File && len(mountsOf[name]) == 0 && ownTargetsOnly(p) {
			out[name] = p
			continue
		}
		spec := o.Volume
		var targets []DesiredTarget
		for _, m := range spec.Mounts {
			targets = append(targets, DesiredTarget{Path: m.Path, ReadOnly: m.ReadOnly, NestedIn: m.NestedIn, AllowNonEmpty: m.AllowNonEmpty, Block: m.Block, From: "Volume/" + name})
		}
		d := NewDesired(name, o.File, spec, IsRawBlock(spec), targets)
		d.Absent = spec.State == "absent"
		for _, mo := range mountsOf[name] {
			m := mo.Mount
			d.Targets = append(d.Targets, DesiredTarget{Path: path.Clean(m.Path), ReadOnly: m.ReadOnly, SubPath: m.SubPath, NestedIn: m.NestedIn, AllowNonEmpty: m.AllowNonEmpty, From: "Mount/" + mo.Metadata.Name})
		}
		sortTargets(d.Targets)
		if p := prev[name]; p != nil && p.Spec == d.Spec && p.StagingPath == d.StagingPath && slices.Equal(p.Targets, d.Targets) {
			d.Generation = p.Generation
		} else {
			d.Generation = Generation(d)
		}
		out[name] = d
	}
	return out
}

// ownTargetsOnly: every target of d is written in its Volume's spec.
func ownTargetsOnly(d *Desired) bool {
	for _, t := range d.Targets {
		if t.From != "Volume/"+d.Name {
			return false
		}
	}
	return true
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

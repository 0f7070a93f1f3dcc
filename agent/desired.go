package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"sort"

	"github.com/volumed/volumed/agent/manifest"
)

// Desired is what the manifests want of one volume.
type Desired struct {
	Name   string
	Driver string
	File   string // the manifest file that declares it
	Spec   *manifest.VolumeSpec
	// Caps is what the source's kind said of it: the core decides by
	// these, never by the kind's name or fields.
	Caps manifest.Caps
	// Absent: the manifest says `state: absent`; the volume is torn down
	// but stays listed.
	Absent  bool
	Targets []DesiredTarget
	// Generation changes whenever anything about the volume's manifest
	// (or a Mount pointing at it) changes; it resets backoff.
	Generation string
	// StagingPath, when set, is where the volume is staged instead of
	// <state-dir>/staging/<name>: the kubelet names it for a CSI volume.
	StagingPath string
	// Block: a raw block volume (a block source with no filesystem): it
	// is attached but never staged, and its targets bind the device node.
	Block bool
}

// DesiredTarget is one place the volume is published.
type DesiredTarget struct {
	Path     string
	ReadOnly bool
	SubPath  string
	// NestedIn names the volume whose target this one lies inside.
	NestedIn string
	// AllowNonEmpty: the target may hide what its directory holds.
	AllowNonEmpty bool
	// Block: the device node is bound at Path, a file.
	Block bool
	From  string // "Volume/name" or "Mount/name", for messages
}

// Wanted reports whether the volume should be set up (not torn down).
func (d *Desired) Wanted() bool { return d != nil && !d.Absent }

// Encrypted: the volume's filesystem lives inside a LUKS2 volume.
func (d *Desired) Encrypted() bool {
	return d != nil && d.Spec != nil && d.Spec.Encryption != nil && d.Spec.Encryption.LUKS2 != nil
}

// Target returns the desired target at path, if any.
func (d *Desired) Target(p string) (DesiredTarget, bool) {
	if d == nil {
		return DesiredTarget{}, false
	}
	for _, t := range d.Targets {
		if t.Path == p {
			return t, true
		}
	}
	return DesiredTarget{}, false
}

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

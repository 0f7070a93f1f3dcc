package decide

import (
	"slices"

	"github.com/volumed/volumed/agent/manifest"
)

// Desired is what the manifests want of one volume.
type Desired struct {
	Name string
	Kind string
	File string // the manifest file that declares it
	Spec *manifest.VolumeSpec
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
	// FSAlso are the other types blkid or a mount may report of a
	// filesystem of Spec.Filesystem.Type (ext4's are ext2 and ext3): the
	// filesystem registry's (internal/filesystem), copied in where
	// Desired is made, since a pure package may not read the registry.
	FSAlso []string
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

// KeepsFS: a filesystem found (blkid's or a mount's type) is the one
// Spec.Filesystem wants: kept as it is, never formatted over, and no
// change of type to report.
func (d *Desired) KeepsFS(found string) bool {
	fs := d.Spec.Filesystem
	return fs != nil && (found == fs.Type || slices.Contains(d.FSAlso, found))
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

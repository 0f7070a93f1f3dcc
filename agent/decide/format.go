package decide

import (
	"fmt"
	"slices"
	"strings"

	"github.com/volumed/volumed/agent/manifest"
)

// ResumeVerdict is what to make of a format a crash left uncertain.
type ResumeVerdict int

// Resume is the pure decision behind resumeFormat. uuid is the one
// the interrupted format gave mkfs ("" from a volumed that chose none).
func Resume(uuid string, sigs []Signature, info FSInfo, d *Desired) (ResumeVerdict, string) {
	switch {
	case len(sigs) == 0:
		return ResumeOrdinary, "blank"
	case !OnlyFilesystem(sigs, d):
		return ResumeOrdinary, "not a lone filesystem of the wanted type"
	case uuid == "":
		return ResumeKeep, "the interrupted format recorded no filesystem UUID, so the filesystem cannot be proven its own"
	case info.UUID != uuid:
		return ResumeKeep, fmt.Sprintf("filesystem UUID %q is not %q, the one the interrupted format was making", info.UUID, uuid)
	case info.EverMounted:
		return ResumeKeep, "the filesystem records that it was mounted, so its format had finished"
	}
	return ResumeCheck, "the interrupted format's own filesystem, never mounted"
}

// OnlyFilesystem: every signature is a filesystem d keeps (mkfs writes
// nothing else).
func OnlyFilesystem(sigs []Signature, d *Desired) bool {
	for _, s := range sigs {
		if s.Usage != "filesystem" || !d.KeepsFS(s.Type) {
			return false
		}
	}
	return len(sigs) > 0
}

// decideFormat says whether a device may and must be formatted. Anything
// that is not the wanted filesystem is refused: data loss is worse than a
// volume that does not come up.
func decideFormat(sigs []Signature, d *Desired, readOnly bool) (bool, error) {
	fs := d.Spec.Filesystem
	var fsTypes []string
	for _, s := range sigs {
		if s.Usage != "filesystem" {
			return false, fmt.Errorf("carries a %s signature (%s, at byte %d): volumed never formats or mounts over it", s.Type, s.Usage, s.Offset)
		}
		if !slices.Contains(fsTypes, s.Type) {
			fsTypes = append(fsTypes, s.Type)
		}
	}
	switch {
	case len(fsTypes) > 1:
		return false, fmt.Errorf("carries several filesystem signatures (%s): refusing to guess", strings.Join(fsTypes, ", "))
	case len(fsTypes) == 1:
		if !d.KeepsFS(fsTypes[0]) {
			return false, fmt.Errorf("holds an existing %s filesystem but the manifest wants %s: not reformatted", fsTypes[0], fs.Type)
		}
		return false, nil
	}
	if fs.Format == manifest.FormatNever {
		return false, fmt.Errorf("is blank and filesystem.format is never")
	}
	if readOnly {
		return false, fmt.Errorf("is blank and the source is read-only: cannot format")
	}
	return true, nil
}

// Mkfs is the format-or-not decision. It is made in the
// operation, not at planning, because it rests on the probe made right
// before mkfs, under the operation's intent: a device written to between
// a plan and its act is never formatted over. redo says the half-made
// filesystem of an interrupted format was found damaged (resumeFormat):
// only that is formatted again, with force, over a signature.
func Mkfs(redo bool, sigs []Signature, d *Desired, readOnly bool) (mkfs, force bool, err error) {
	if redo {
		return true, true, nil
	}
	mkfs, err = decideFormat(sigs, d, readOnly)
	return mkfs, false, err
}

const (
	// ResumeOrdinary: nothing on the device speaks to it (blank, or
	// something decideFormat refuses anyway): the ordinary path decides.
	ResumeOrdinary ResumeVerdict = iota
	// ResumeKeep: the filesystem is not provably the half-made one;
	// it is kept, whatever a mount of it says later.
	ResumeKeep
	// ResumeCheck: the filesystem is the one that format was making and
	// was never mounted: its read-only checker decides.
	ResumeCheck
)

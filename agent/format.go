package agent

import (
	"crypto/rand"
	"fmt"
)

// resumeVerdict is what to make of a format a crash left uncertain.
type resumeVerdict int

const (
	// resumeOrdinary: nothing on the device speaks to it (blank, or
	// something decideFormat refuses anyway): the ordinary path decides.
	resumeOrdinary resumeVerdict = iota
	// resumeKeep: the filesystem is not provably the half-made one;
	// it is kept, whatever a mount of it says later.
	resumeKeep
	// resumeCheck: the filesystem is the one that format was making and
	// was never mounted: its read-only checker decides.
	resumeCheck
)

// decideResume is the pure decision behind resumeFormat. uuid is the one
// the interrupted format gave mkfs ("" from a volumed that chose none).
func decideResume(uuid string, sigs []Signature, info FSInfo, fstype string) (resumeVerdict, string) {
	switch {
	case len(sigs) == 0:
		return resumeOrdinary, "blank"
	case !onlyFilesystem(sigs, fstype):
		return resumeOrdinary, "not a lone filesystem of the wanted type"
	case uuid == "":
		return resumeKeep, "the interrupted format recorded no filesystem UUID, so the filesystem cannot be proven its own"
	case info.UUID != uuid:
		return resumeKeep, fmt.Sprintf("filesystem UUID %q is not %q, the one the interrupted format was making", info.UUID, uuid)
	case info.EverMounted:
		return resumeKeep, "the filesystem records that it was mounted, so its format had finished"
	}
	return resumeCheck, "the interrupted format's own filesystem, never mounted"
}

// onlyFilesystem: every signature is a filesystem of a type compatible
// with fstype (mkfs writes nothing else).
func onlyFilesystem(sigs []Signature, fstype string) bool {
	for _, s := range sigs {
		if s.Usage != "filesystem" || !compatibleFS(s.Type, fstype) {
			return false
		}
	}
	return len(sigs) > 0
}

// newUUID is a random (version 4) UUID for a filesystem about to be made.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

package agent

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/volumed/volumed/agent/manifest"
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

// resumeFormat settles a format that a crash left uncertain: it reports
// whether that format must be done again, which only a half-made
// filesystem of its own, found damaged by its read-only checker, earns.
// A mount failure is never a reason: options, permissions or a path make
// mounts fail on perfect filesystems.
func (a *Agent) resumeFormat(ctx context.Context, d *Desired, dev string, sigs []Signature) (bool, error) {
	uuid, pending := a.formats.interrupted.of(d.Name)
	if !pending {
		return false, nil
	}
	fstype := d.Spec.Filesystem.Type
	var info FSInfo
	if onlyFilesystem(sigs, fstype) {
		var err error
		if info, err = a.cfg.FS.Inspect(ctx, dev); err != nil {
			return false, fmt.Errorf("inspect %s after an interrupted format: %w", dev, err)
		}
	}
	verdict, why := decideResume(uuid, sigs, info, fstype)
	log := a.cfg.Log.With("volume", d.Name, "device", dev)
	switch verdict {
	case resumeKeep:
		log.Info("the interrupted format had finished; the filesystem is kept", "why", why)
		return false, nil
	case resumeOrdinary:
		return false, nil
	}
	res, err := a.cfg.FS.CheckReadOnly(ctx, fstype, dev)
	switch res {
	case FSCheckDamaged:
		log.Warn("the filesystem the interrupted format was making is incomplete; formatting again", "uuid", uuid, "check", err)
		return true, nil
	case FSCheckClean:
		log.Info("the interrupted format had finished (its filesystem checks clean); kept", "uuid", uuid)
	default:
		log.Warn("cannot tell whether the interrupted format finished; the filesystem is kept", "uuid", uuid, "check", err)
	}
	return false, nil
}

// formatMemory is what the agent remembers of formats between
// operations: those a crash left uncertain (with the UUID each was
// making: a filesystem's, or a LUKS2 header's for an encrypt) and those
// refused after a failed mkfs.
type formatMemory struct {
	interrupted *interruptions // mkfs
	encrypting  *interruptions // luksFormat
	mu          sync.Mutex
	refused     map[string]refusedFormat
}

func newFormatMemory() *formatMemory {
	return &formatMemory{interrupted: newInterruptions(), encrypting: newInterruptions(), refused: map[string]refusedFormat{}}
}

// interruptions are, per volume, the UUID that a format a crash left
// uncertain was writing.
type interruptions struct {
	mu   sync.Mutex
	uuid map[string]string
}

func newInterruptions() *interruptions { return &interruptions{uuid: map[string]string{}} }

func (m *interruptions) set(name, uuid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.uuid[name] = uuid
}

// of returns the UUID of the volume's interrupted format, if one was.
func (m *interruptions) of(name string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uuid, ok := m.uuid[name]
	return uuid, ok
}

func (m *interruptions) clear(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.uuid, name)
}

func (m *formatMemory) forgetRefused(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.refused, name)
}

func (m *formatMemory) refuse(name string, r refusedFormat) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused[name] = r
}

// refusedFor returns the refusal kept for the volume and whether one was
// kept; a refusal made for another generation is forgotten as it is
// returned.
func (m *formatMemory) refusedFor(name, generation string) (refusedFormat, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.refused[name]
	if ok && r.generation != generation {
		delete(m.refused, name)
	}
	return r, ok
}

func mkfsArgs(fs *manifest.Filesystem, force bool) []string {
	args := slices.Clone(fs.MkfsOptions)
	if force && (fs.Type == "xfs" || fs.Type == "btrfs") {
		args = append(args, "-f")
	}
	return args
}

// decideFormat says whether a device may and must be formatted. Anything
// that is not the wanted filesystem is refused: data loss is worse than a
// volume that does not come up.
func decideFormat(sigs []Signature, fs *manifest.Filesystem, readOnly bool) (bool, error) {
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
		if !compatibleFS(fsTypes[0], fs.Type) {
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

// decideMkfs is the format-or-not decision. It is made in the
// operation, not at planning, because it rests on the probe made right
// before mkfs, under the operation's intent: a device written to between
// a plan and its act is never formatted over. redo says the half-made
// filesystem of an interrupted format was found damaged (resumeFormat):
// only that is formatted again, with force, over a signature.
func decideMkfs(redo bool, sigs []Signature, fs *manifest.Filesystem, readOnly bool) (mkfs, force bool, err error) {
	if redo {
		return true, true, nil
	}
	mkfs, err = decideFormat(sigs, fs, readOnly)
	return mkfs, false, err
}

func compatibleFS(found, want string) bool {
	if want == "ext4" {
		return found == "ext4" || found == "ext3" || found == "ext2"
	}
	return found == want
}

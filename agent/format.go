package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
)

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
	if decide.OnlyFilesystem(sigs, fstype) {
		var err error
		if info, err = a.cfg.FS.Inspect(ctx, dev); err != nil {
			return false, fmt.Errorf("inspect %s after an interrupted format: %w", dev, err)
		}
	}
	verdict, why := decide.Resume(uuid, sigs, info, fstype)
	log := a.cfg.Log.With("volume", d.Name, "device", dev)
	switch verdict {
	case decide.ResumeKeep:
		log.Info("the interrupted format had finished; the filesystem is kept", "why", why)
		return false, nil
	case decide.ResumeOrdinary:
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

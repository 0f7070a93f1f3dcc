// Health checks the resync runs against the kernel: a loop image
// replaced, its filesystem full, a volume filesystem the kernel gave up
// on; each raises or clears a condition.

package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/internal/filesystem"
	"github.com/volumed/volumed/store"
)

// lowSpaceBytes: below this much free space (or 1% of the filesystem, if
// less) the filesystem holding a sparse loop image counts as full: the
// next burst of writes into the volume fails.
const lowSpaceBytes = 16 << 20

// detect runs the checks that need the kernel, at the resync's drift
// check and at start-up, never in a reconcile pass: a stat per volume,
// a statfs per image directory and a sysfs read per ext4 volume.
func (a *Agent) detect(ctx context.Context, mounts MountTable) {
	desired := a.desiredSnapshot()
	spaces := map[string]dirSpace{}
	recs := a.state.Snapshot()
	a.checkSources(ctx, desired, recs)
	counts := a.errorCounts(desired, recs)
	for name, rec := range recs {
		d := desired[name]
		a.learnMounted(d, rec)
		p, err := a.checkBacking(d, rec)
		a.apply(name, CondBackingChanged, p, err)
		p, err = checkBackingSpace(d, rec, spaces)
		a.apply(name, CondBackingFull, p, err)
		p, err = a.checkFilesystem(d, rec, mounts, counts[name])
		a.apply(name, CondFilesystemError, p, err)
		if d.Wanted() {
			// Wanted again: whatever blocked its teardown no longer matters.
			a.apply(name, CondTeardownBlocked, nil, nil)
		}
	}
}

func (a *Agent) checkBacking(d *Desired, rec *store.Volume) (*Problem, error) {
	if rec.Attachment == nil {
		return nil, nil
	}
	bc, ok := a.cfg.Attachers[rec.Attachment.Kind].(BackingChecker)
	if !ok {
		return nil, nil
	}
	return bc.CheckBacking(d, *rec.Attachment)
}

// dirSpace is one statfs of a directory holding loop images.
type dirSpace struct {
	avail, size int64
	err         error
}

func statDir(dir string) dirSpace {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return dirSpace{err: fmt.Errorf("statfs %s: %w", dir, err)}
	}
	return dirSpace{avail: int64(s.Bavail) * int64(s.Bsize), size: int64(s.Blocks) * int64(s.Bsize)}
}

func (s dirSpace) low() bool {
	return s.avail <= 0 || s.avail < min(lowSpaceBytes, s.size/100)
}

// checkBackingSpace statfs's the directory of a writable loop image once
// per detect (seen), however many images it holds.
func checkBackingSpace(d *Desired, rec *store.Volume, seen map[string]dirSpace) (*Problem, error) {
	if d == nil || rec.Attachment == nil || d.Caps.ImageFile == "" || d.Caps.ReadOnly {
		return nil, nil
	}
	file := d.Caps.ImageFile
	dir := filepath.Dir(file)
	s, ok := seen[dir]
	if !ok {
		s = statDir(dir)
		seen[dir] = s
	}
	if s.err != nil || !s.low() {
		return nil, s.err
	}
	reason := "LowSpace"
	if s.avail <= 0 {
		reason = "NoSpace"
	}
	return &Problem{Reason: reason, Message: fmt.Sprintf(
		"the filesystem holding the image %s has %d bytes free of %d: the image is sparse, so writes into the volume fail with I/O errors once it is full; free space in %s or move the image to a larger filesystem",
		file, max(s.avail, 0), s.size, dir)}, nil
}

// fsChecked: the volume's filesystem is one checkFilesystem looks at,
// mounted by the agent itself (not by a driver that stages).
func (a *Agent) fsChecked(d *Desired, rec *store.Volume) bool {
	if d == nil || d.Spec.Filesystem == nil || rec.Staging == nil || rec.Attachment == nil {
		return false
	}
	_, staged := a.cfg.Attachers[rec.Attachment.Kind].(Stager)
	return !staged
}

// errorCounts reads the error counter of every checked volume's
// filesystem whose type keeps one, each type's in one batch: a listing
// of what is mounted, then the counters on a few workers.
func (a *Agent) errorCounts(desired map[string]*Desired, recs map[string]*store.Volume) map[string]filesystem.Counted {
	byType := map[string][]string{}
	for name, rec := range recs {
		if d := desired[name]; a.fsChecked(d, rec) {
			byType[d.Spec.Filesystem.Type] = append(byType[d.Spec.Filesystem.Type], name)
		}
	}
	out := map[string]filesystem.Counted{}
	for typ, names := range byType {
		t, ok := filesystem.Of(typ)
		if !ok || !t.ErrorCounters {
			continue
		}
		devs := make([]string, len(names))
		for i, n := range names {
			devs[i] = blockDevice(recs[n])
		}
		for i, c := range t.ErrorCounts("", devs) {
			out[names[i]] = c
		}
	}
	return out
}

// checkFilesystem looks for a volume filesystem the kernel gave up on:
// read-only although the manifest wants it writable (errors=remount-ro
// after an error), or errors ext4 has recorded (count, read by
// errorCounts).
func (a *Agent) checkFilesystem(d *Desired, rec *store.Volume, mounts MountTable, count filesystem.Counted) (*Problem, error) {
	if !a.fsChecked(d, rec) {
		return nil, nil
	}
	dev, fstype := blockDevice(rec), d.Spec.Filesystem.Type
	var found []string
	reason := ""
	if st := stagingInfo(mounts, rec); st != nil {
		// The superblock's options say what the kernel did on an error:
		// "ro" (older ext4, others), "emergency_ro" (ext4 since 6.x, which
		// keeps "rw"), "shutdown" (a filesystem that stopped all I/O).
		switch super := st.VFSOptions; {
		case hasOption(super, "shutdown") || shutDown(rec.Staging.Path):
			reason = "ShutDown"
			found = append(found, "the kernel shut it down, so every read and write fails")
		case (hasOption(super, "ro") || hasOption(super, "emergency_ro")) && wantsWritable(d):
			reason = "RemountedReadOnly"
			found = append(found, "the kernel made it read-only, so every write fails")
		}
	}
	if count.Err != nil {
		return nil, count.Err
	}
	if count.N > 0 {
		if reason == "" {
			reason = "Errors"
		}
		found = append(found, fmt.Sprintf("%s has recorded %d errors (%s)", count.FS, count.N, count.Path))
	}
	if reason == "" {
		return nil, nil
	}
	return &Problem{Reason: reason, Message: fmt.Sprintf(
		"the %s filesystem on %s is damaged: %s; stop its users, unmount it (remove the manifest), run fsck on %s, then let volumed mount it again",
		fstype, dev, strings.Join(found, "; "), dev)}, nil
}

// shutDown: opening the filesystem's root fails with EIO, which is how a
// shut-down xfs answers while statfs and mountinfo still look healthy.
// The root is always cached, so this costs no device I/O.
func shutDown(root string) bool {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	return errors.Is(err, unix.EIO)
}

func wantsWritable(d *Desired) bool {
	return !decide.ReadOnlySource(d) && !slices.Contains(d.Spec.Filesystem.MountOptions, "ro")
}

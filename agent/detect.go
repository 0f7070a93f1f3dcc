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
	for name, rec := range recs {
		d := desired[name]
		a.learnMounted(d, rec)
		p, err := a.checkBacking(d, rec)
		a.apply(name, CondBackingChanged, p, err)
		p, err = checkBackingSpace(d, rec, spaces)
		a.apply(name, CondBackingFull, p, err)
		p, err = a.checkFilesystem(d, rec, mounts)
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

// checkFilesystem looks for a volume filesystem the kernel gave up on:
// read-only although the manifest wants it writable (errors=remount-ro
// after an error), or errors ext4 has recorded.
func (a *Agent) checkFilesystem(d *Desired, rec *store.Volume, mounts MountTable) (*Problem, error) {
	if d == nil || d.Spec.Filesystem == nil || rec.Staging == nil || rec.Attachment == nil {
		return nil, nil
	}
	if _, staged := a.cfg.Attachers[rec.Attachment.Kind].(Stager); staged {
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
	if t, ok := filesystem.Of(fstype); ok {
		n, path, err := t.ErrorCount("", dev)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			if reason == "" {
				reason = "Errors"
			}
			found = append(found, fmt.Sprintf("%s has recorded %d errors (%s)", t.Name, n, path))
		}
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

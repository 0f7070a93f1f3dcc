package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/internal/holders"
	"github.com/volumed/volumed/store"
)

// busyWait bounds how long an unmount waits for a busy mount to be let
// go: the mount driver would wait forever, and a holder that never
// leaves must show as a failure (a condition naming it, retries), not as
// a volume stuck "Unmounting". Detaches are not bounded here: a network
// logout may rightly take longer, and each attacher bounds its own.
const busyWait = 5 * time.Second

// lowSpaceBytes: below this much free space (or 1% of the filesystem, if
// less) the filesystem holding a sparse loop image counts as full: the
// next burst of writes into the volume fails.
const lowSpaceBytes = 16 << 20

// apply raises typ on volume when p is set and clears it when p is nil;
// a check that could not tell (err) leaves what was known.
func (a *Agent) apply(volume, typ string, p *Problem, err error) {
	switch {
	case err != nil:
		a.cfg.Log.Warn("condition check failed; keeping what was known", "volume", volume, "type", typ, "error", err)
	case p == nil:
		if a.conds.Clear(volume, typ) {
			a.cfg.Log.Info("condition cleared", "volume", volume, "type", typ)
		}
	default:
		if !a.conds.Has(volume, typ) {
			a.cfg.Log.Warn("condition raised", "volume", volume, "type", typ, "reason", p.Reason, "message", p.Message)
		}
		a.conds.Set(volume, typ, p.Reason, p.Message)
	}
}

// detect runs the checks that need the kernel, at the resync's drift
// check and at start-up, never in a reconcile pass: a stat per volume,
// a statfs per image directory and a sysfs read per ext4 volume.
func (a *Agent) detect(mounts MountTable) {
	desired := a.desiredSnapshot()
	spaces := map[string]dirSpace{}
	for name, rec := range a.state.Snapshot() {
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
	bc, ok := a.cfg.Attachers[rec.Attachment.Driver].(BackingChecker)
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
	if _, staged := a.cfg.Attachers[rec.Attachment.Driver].(Stager); staged {
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
	if strings.HasPrefix(fstype, "ext") {
		n, err := ext4Errors(dev)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			if reason == "" {
				reason = "Errors"
			}
			found = append(found, fmt.Sprintf("ext4 has recorded %d errors (%s)", n, filepath.Join(ext4Sys(dev), "errors_count")))
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

// ext4Sys is ext4's sysfs directory of the filesystem on dev, named by
// the kernel's name of the device: /dev/mapper/volumed-x is dm-N there.
func ext4Sys(dev string) string {
	name := filepath.Base(dev)
	var st unix.Stat_t
	if unix.Stat(dev, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK {
		if p, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))); err == nil {
			name = filepath.Base(p)
		}
	}
	return filepath.Join("/sys/fs/ext4", name)
}

// ext4Errors reads the error count ext4 keeps in its superblock; 0 when
// the device has no ext4 mounted (nothing to report).
func ext4Errors(dev string) (int, error) {
	b, err := os.ReadFile(filepath.Join(ext4Sys(dev), "errors_count"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ext4 error count of %s: %w", dev, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("ext4 error count of %s: %w", dev, err)
	}
	return n, nil
}

// teardownStep runs one unmount or detach, waiting at most wait (0: as
// long as the step does) for a holder to let go; a refusal as busy
// raises TeardownBlocked naming the holders of path, and success clears it.
func (a *Agent) teardownStep(ctx context.Context, name, what, path string, wait time.Duration, step func(context.Context) error) error {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	err := step(ctx)
	switch {
	case err == nil:
		a.apply(name, CondTeardownBlocked, nil, nil)
	case errors.Is(err, ErrBusy):
		a.apply(name, CondTeardownBlocked, busyProblem(what, path, err), nil)
	}
	return err
}

func busyProblem(what, path string, err error) *Problem {
	hs, herr := holders.Find("/proc", path)
	held := "held by " + holders.Describe(hs)
	switch {
	case herr != nil:
		held = "the holders could not be listed: " + herr.Error()
	case len(hs) == 0:
		held = "no process holds it through a path (look for mounts inside it, or users in other mount namespaces or in the kernel)"
	}
	return &Problem{Reason: "Busy", Message: fmt.Sprintf(
		"%s of %s refused: %v; %s; stop them or move them out, and volumed retries", what, path, err, held)}
}

// growResult records the outcome of an online grow as a condition: a
// failed grow keeps the volume working at its old size, so without one
// the only trace would be a log line at every resync.
func (a *Agent) growResult(name string, err error) {
	switch {
	case errors.Is(err, errRetryNow):
	case err != nil:
		a.apply(name, CondGrowFailed, &Problem{Reason: "GrowError", Message: fmt.Sprintf(
			"growing the volume to what the manifest asks failed: %v; the filesystem keeps its old size and volumed retries at each resync", err)}, nil)
	default:
		a.apply(name, CondGrowFailed, nil, nil)
	}
}

// The format step of mount_device: the arguments mkfs is given, and a
// format a crash left uncertain settled by its read-only checker.

package agent

import (
	"context"
	"fmt"
	"slices"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/filesystem"
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
	if decide.OnlyFilesystem(sigs, d) {
		var err error
		if info, err = a.cfg.FS.Inspect(ctx, dev); err != nil {
			return false, fmt.Errorf("inspect %s after an interrupted format: %w", dev, err)
		}
	}
	verdict, why := decide.Resume(uuid, sigs, info, d)
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

func mkfsArgs(fs *manifest.Filesystem, force bool) []string {
	args := slices.Clone(fs.MkfsOptions)
	if t, ok := filesystem.Lookup(fs.Type); ok && force && t.Mkfs.Force != "" {
		args = append(args, t.Mkfs.Force)
	}
	return args
}

package agent

import (
	"context"

	"github.com/volumed/volumed/internal/readonce"
)

// verify is the resync's drift check: records are compared with the
// kernel and corrected, so that what vanished behind our back is put
// back by the next pass. Volumes with a running operation are skipped
// (only the reconciler starts operations, and it is the caller).
func (a *Agent) verify(ctx context.Context) {
	// One look at the host for every volume's check and health check.
	ctx = readonce.Open(ctx)
	// The records first, then the kernel: a correction is made only to a
	// record no operation changed since (State.Correct), so the table,
	// read after, is never older than the record it corrects.
	seen := a.state.Snapshot()
	mounts, err := a.cfg.Mounter.Mounts()
	if err != nil {
		a.cfg.Log.Warn("drift check: read mount table", "error", err)
		return
	}
	for name, rec := range seen {
		if _, busy := a.exec.Running(name); busy {
			continue
		}
		fixed := cloneVolume(rec)
		var changes []string
		if fixed.Attachment != nil {
			if att, err := a.attacher(fixed.Attachment.Kind); err == nil {
				dev, ok, err := att.Verify(ctx, *fixed.Attachment)
				switch {
				case err != nil:
					// Unknown is not gone: the record stays as it is.
					a.driftLog.failed("verify "+name, "drift check: cannot verify the attachment; its record is kept", err,
						"volume", name, "device", fixed.Attachment.Device)
				case !ok:
					fixed.Attachment = nil
					changes = append(changes, "attachment gone")
				default:
					fixed.Attachment.Device = dev
				}
				if err == nil {
					a.driftLog.ok("verify "+name, "drift check: the attachment verifies again", "volume", name)
				}
			}
		}
		if m := fixed.Mapping; m != nil && fixed.Attachment != nil && a.cfg.Crypt != nil {
			_, ok, err := a.cfg.Crypt.Adopt(ctx, fixed.Attachment.Device, m.Name, m.UUID)
			if err == nil && !ok {
				fixed.Mapping = nil
				changes = append(changes, "mapping "+m.Name+" closed")
			}
		}
		st := stagingInfo(mounts, fixed)
		if fixed.Staging != nil && st == nil {
			fixed.Staging = nil
			changes = append(changes, "staging mount gone")
		}
		kept := fixed.Targets[:0]
		for _, t := range fixed.Targets {
			top := mounts.Top(t.Path)
			if top != nil && (top.ID == t.MountID || mounts.SameSource(top, st, t.SubPath)) {
				t.MountID = top.ID
				kept = append(kept, t)
				continue
			}
			changes = append(changes, "target "+t.Path+" unmounted")
		}
		fixed.Targets = kept
		if len(changes) == 0 {
			continue
		}
		done, err := a.state.Correct(rec, fixed)
		switch {
		case !done:
			// An operation of the volume recorded since: its own checks
			// are newer than this one; the next resync looks again.
		case err != nil:
			a.cfg.Log.Error("record drift", "volume", name, "error", err)
		default:
			a.cfg.Log.Warn("drift: repairing what changed behind volumed's back", "volume", name, "changes", changes)
		}
	}
	a.detect(ctx, mounts)
}

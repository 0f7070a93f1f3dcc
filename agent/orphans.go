package agent

import (
	"context"

	"github.com/moby/sys/mountinfo"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// mayHaveUnrecorded: a volume with no recorded attachment may still have
// one in the kernel, unless its driver lists what is owned and all of that
// is accounted for by records (and no crash left this volume uncertain).
func (a *Agent) mayHaveUnrecorded(kind string, ownedLists map[string][]store.Attachment, strays map[string]bool, pending []string) bool {
	_, listed := ownedLists[kind]
	return !listed || strays[kind] || len(pending) > 0
}

// listOwned lists, per driver that can, the attachments carrying our
// marker. A driver whose list failed is left out (and so looked for
// volume by volume, and its orphans left for the next start).
func (a *Agent) listOwned(ctx context.Context) map[string][]store.Attachment {
	out := map[string][]store.Attachment{}
	for kind, att := range a.cfg.Attachers {
		lister, ok := att.(OrphanLister)
		if !ok {
			continue
		}
		list, err := lister.ListOwned(ctx)
		if err != nil {
			a.cfg.Log.Warn("list own attachments", "driver", kind, "error", err)
			continue
		}
		out[kind] = list
	}
	return out
}

// detachOrphans tears down attachments carrying our marker that no
// volume claims: left by a crash between attaching and recording, for a
// volume that is no longer wanted.
func (a *Agent) detachOrphans(ctx context.Context, ownedLists map[string][]store.Attachment, claimed map[string]bool, mounts MountTable) {
	for kind, list := range ownedLists {
		att := a.cfg.Attachers[kind]
		for _, o := range list {
			if claimed[o.Identity] || !decide.MayRelease(o, nil, false) {
				continue
			}
			if inUse(mounts, o.Device) {
				a.cfg.Log.Warn("orphan attachment is mounted; left alone", "device", o.Device, "identity", o.Identity)
				continue
			}
			if err := att.Detach(ctx, o); err != nil {
				a.cfg.Log.Warn("detach orphan attachment", "device", o.Device, "error", err)
				continue
			}
			a.cfg.Log.Info("detached orphan attachment", "device", o.Device, "identity", o.Identity)
		}
	}
}

// logLeftovers logs, once at start-up, what a driver made that no
// manifest names any more (LeftoverLister): kept, never removed.
func (a *Agent) logLeftovers(ctx context.Context, desired map[string]*Desired) {
	wanted := make([]*Desired, 0, len(desired))
	for _, d := range desired {
		wanted = append(wanted, d)
	}
	for kind, att := range a.cfg.Attachers {
		lister, ok := att.(LeftoverLister)
		if !ok {
			continue
		}
		list, err := lister.ListLeftovers(ctx, wanted)
		if err != nil {
			a.cfg.Log.Warn("list leftovers", "driver", kind, "error", err)
			continue
		}
		for _, what := range list {
			a.cfg.Log.Warn("left by volumed and named by no manifest; kept, never removed", "driver", kind, "what", what)
		}
	}
}

func ownedAt(owned []store.Attachment, top *mountinfo.Info) (store.Attachment, bool) {
	if top == nil {
		return store.Attachment{}, false
	}
	for _, o := range owned {
		if sameDevice(top, o.Device) {
			return o, true
		}
	}
	return store.Attachment{}, false
}

func inUse(mounts MountTable, dev string) bool {
	for _, m := range mounts.All() {
		if sameDevice(m, dev) {
			return true
		}
	}
	return false
}

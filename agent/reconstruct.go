package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// reconstruct rebuilds the actual state before the first pass: the
// store's records and leftover intents, checked against the kernel,
// which wins where they disagree. Whatever is in place and right is
// adopted, so nothing that is already right is redone.
func (a *Agent) reconstruct(ctx context.Context) error {
	recs, intents, err := a.cfg.Store.Load()
	if err != nil {
		return err
	}
	if err := a.idents.load(); err != nil {
		return err
	}
	mounts, err := a.cfg.Mounter.Mounts()
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	desired := a.desiredSnapshot()
	pending := map[string][]string{}
	// publishing: the targets (and their subPaths) of publishes a crash
	// caught. Nothing in the kernel names a bind mount's owner, so when
	// neither a record nor a manifest names the target any more, only
	// the intent tells that the bind there is ours to take down.
	publishing := map[string]map[string]string{}
	// leftovers: volumes a crash caught attaching, that neither a record
	// nor a manifest names any more. Their intent says what they were
	// attaching, so it can be found and torn down.
	leftovers := map[string]*Desired{}
	for _, in := range intents {
		pending[in.Volume] = append(pending[in.Volume], in.Op)
		if in.Op == OpPublish && in.Inputs["target"] != "" {
			if publishing[in.Volume] == nil {
				publishing[in.Volume] = map[string]string{}
			}
			publishing[in.Volume][in.Inputs["target"]] = in.Inputs["subPath"]
		}
		a.cfg.Log.Info("resolving uncertain operation left by a previous run", "volume", in.Volume, "operation", in.Op, "started", in.StartedAt)
		if in.Op == OpAttach && recs[in.Volume] == nil && desired[in.Volume] == nil {
			if d := desiredFromIntent(in); d != nil {
				leftovers[in.Volume] = d
			}
		}
	}

	names := make([]string, 0, len(recs)+len(desired))
	for n := range recs {
		names = append(names, n)
	}
	for n := range desired {
		if recs[n] == nil {
			names = append(names, n)
		}
	}
	for n := range leftovers {
		names = append(names, n)
	}
	sort.Strings(names)

	a.state = NewState(a.cfg.Store, a.cfg.Now, nil)
	a.state.OnRecorded(a.noteRecorded)
	a.state.OnCommitWait(a.exec.Yield)
	// What carries our marker, listed once: a volume with no record need
	// not be looked for in the kernel (one scan per volume) when nothing
	// of ours is unaccounted for by the records, the usual case.
	ownedLists := a.listOwned(ctx)
	recorded := map[string]bool{}
	holders := map[string]string{} // identity -> the volume whose record holds it
	for name, r := range recs {
		if r.Attachment != nil {
			recorded[r.Attachment.Identity] = true
			holders[r.Attachment.Identity] = name
		}
	}
	strays := map[string]bool{} // drivers with marked attachments no record names
	for driver, list := range ownedLists {
		for _, o := range list {
			if !recorded[o.Identity] {
				strays[driver] = true
			}
		}
	}
	claimed := map[string]bool{} // identities of attachments some volume owns
	for _, name := range names {
		d := desired[name]
		if d == nil {
			d = leftovers[name]
		}
		v := a.probeVolume(ctx, name, recs[name], d, mounts, pending[name], publishing[name], mappingUUID(name, recs[name], intents), ownedLists, strays, holders)
		if v.Attachment != nil {
			claimed[v.Attachment.Identity] = true
			if holders[v.Attachment.Identity] == "" {
				// Adopted without a record: a later volume whose selector
				// picks the same disk leaves it to this one.
				holders[v.Attachment.Identity] = name
			}
			if v.Attachment.Owned {
				a.sessions.add(sessionKey(v.Attachment.Driver, v.Attachment.Session))
			}
		}
		if err := a.state.AdoptKnown(v, recs[name]); err != nil {
			// Kept in memory and retried: a full state filesystem must
			// not keep the agent from starting.
			a.cfg.Log.Warn("cannot record reconstructed state yet; retrying", "volume", name, "error", err)
		}
		if uuid, ok := formatInterruptedIntent(intents, name); ok && v.Staging == nil {
			// A volume found mounted has a finished format.
			a.formats.interrupted.set(name, uuid)
		}
		if uuid, ok := lastIntent(intents, name, OpEncrypt); ok && uuid != "" && v.Mapping == nil {
			// A volume found open has a finished header.
			a.formats.encrypting.set(name, uuid)
		}
	}
	a.detachOrphans(ctx, ownedLists, claimed, mounts)
	a.sweepStaging(desired)
	// A restarted agent sees at once what went wrong while it was away
	// (an image deleted under its device), not a minute later.
	a.detect(mounts)
	for _, in := range intents {
		if err := a.cfg.Store.DropIntent(in.ID); err != nil {
			a.cfg.Log.Warn("cannot drop resolved intent yet; retrying", "volume", in.Volume, "intent", in.ID, "error", err)
			a.state.KeepIntent(in.Volume, in.ID, fmt.Errorf("drop resolved intent %d: %w", in.ID, err))
		}
	}
	return nil
}

// sweepStaging removes the staging dirs of volumes neither wanted nor
// recorded, which their teardown left (opUnmountDevice). Only an empty
// dir that is no mount point goes: rmdir refuses anything else.
func (a *Agent) sweepStaging(desired map[string]*Desired) {
	dir := filepath.Join(a.cfg.StateDir, "staging")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() && desired[n] == nil && a.state.Get(n) == nil {
			_ = unix.Rmdir(filepath.Join(dir, n))
		}
	}
}

// formatInterruptedIntent returns the filesystem UUID of the volume's
// last format intent left uncertain, if any ("" for an intent of a
// version that chose none).
func formatInterruptedIntent(intents []store.Intent, name string) (string, bool) {
	return lastIntent(intents, name, OpFormat)
}

// mappingUUID is the LUKS2 UUID a volume's mapping must map to be
// adopted: the record's, else the one an open left uncertain was
// opening ("" when neither says: the header on the device decides).
func mappingUUID(name string, rec *store.Volume, intents []store.Intent) string {
	if rec != nil && rec.Mapping != nil {
		return rec.Mapping.UUID
	}
	uuid, _ := lastIntent(intents, name, OpOpen)
	return uuid
}

// lastIntent returns the "uuid" input of the volume's last intent of op
// left uncertain, if any.
func lastIntent(intents []store.Intent, name, op string) (string, bool) {
	uuid, found := "", false
	for _, in := range intents {
		if in.Volume == name && in.Op == op {
			uuid, found = in.Inputs["uuid"], true
		}
	}
	return uuid, found
}

// probeVolume finds what of one volume is really in the kernel.
func (a *Agent) probeVolume(ctx context.Context, name string, rec *store.Volume, d *Desired, mounts MountTable, pending []string, publishing map[string]string, mapUUID string, ownedLists map[string][]store.Attachment, strays map[string]bool, holders map[string]string) *store.Volume {
	v := &store.Volume{Name: name}
	switch {
	case d != nil:
		v.Driver = d.Driver
	case rec != nil:
		v.Driver = rec.Driver
	}
	log := a.cfg.Log.With("volume", name)

	// The attachment: a recorded one is checked by identity; without a
	// record, one carrying our marker is owned (the state file may have
	// been lost, or we died between attaching and recording).
	if rec != nil && rec.Attachment != nil {
		if listed(ownedLists[rec.Attachment.Driver], *rec.Attachment) {
			// Seen in the kernel by this start's one pass over it: a
			// Verify per volume read sysfs again, most of a restart.
			v.Attachment = rec.Attachment
		} else if att, err := a.attacher(rec.Attachment.Driver); err == nil {
			dev, ok, err := att.Verify(ctx, *rec.Attachment)
			switch {
			case err != nil:
				log.Warn("cannot verify recorded attachment; keeping the record", "identity", rec.Attachment.Identity, "error", err)
				v.Attachment = rec.Attachment
			case ok:
				at := *rec.Attachment
				at.Device = dev
				v.Attachment = &at
			default:
				log.Info("recorded attachment is gone", "identity", rec.Attachment.Identity)
			}
		}
	}
	if v.Attachment == nil && d != nil && a.mayHaveUnrecorded(d.Driver, ownedLists, strays, pending) {
		if att, err := a.attacher(d.Driver); err == nil {
			found, err := att.Find(ctx, d)
			if err != nil {
				log.Warn("look for an existing attachment", "error", err)
			}
			f, ok := pick(found)
			if h := holders[f.Identity]; ok && h != "" && h != name {
				// Two selectors may pick one disk: its holder keeps it.
				log.Warn("not adopting an attachment another volume holds", "identity", f.Identity, "holder", h)
				ok = false
			}
			ok = ok && a.adoptable(att, name, a.stagingPathOf(name, d, rec), f, mounts)
			if ok {
				// A session carries no marker of ours: when a crash caught
				// us attaching it, we take it as owned (else it would leak);
				// otherwise it was there before us and is only used.
				owned := f.Owned || (f.Reusable && slices.Contains(pending, OpAttach))
				v.Attachment = &store.Attachment{
					Driver: d.Driver, Device: f.Device, Identity: f.Identity, Session: f.Session,
					Owned: owned && !f.Pinned, Pinned: f.Pinned, Source: d.Caps.Key,
				}
				log.Info("adopting attachment found in the kernel", "device", f.Device, "identity", f.Identity, "owned", v.Attachment.Owned)
				a.notes.set(name, f.Note)
			}
		}
	}

	// The staging mount: the staging dir is ours alone.
	p := a.stagingPathOf(name, d, rec)
	if v.Attachment == nil && d != nil {
		// Our device still mounted at the volume's staging path is the
		// volume's, even when its image was deleted or moved away (so it
		// is not found by the file): adopting it keeps the data and stops
		// a second device (and a format) on whatever is at the path now.
		if o, ok := ownedAt(ownedLists[d.Driver], mounts.Top(p)); ok {
			v.Attachment = &o
			log.Info("adopting our attachment mounted at the staging path", "device", o.Device, "identity", o.Identity)
		}
	}
	// An encrypted volume's mapping: adopted when open and ours.
	if d.Encrypted() || (rec != nil && rec.Mapping != nil) || slices.Contains(pending, OpOpen) || slices.Contains(pending, OpEncrypt) {
		a.adoptMapping(ctx, name, v, rec, mapUUID)
	}
	var st *mountinfo.Info
	stager, staged := a.cfg.Attachers[v.Driver].(Stager)
	if top := mounts.Top(p); top != nil {
		if staged && d != nil && v.Attachment != nil && stager.IsStaged(d, p) {
			st = top
			v.Staging = &store.MountRecord{Path: p, Device: v.Attachment.Device, FSType: v.Driver, MountID: top.ID, Owned: true}
		} else if v.Attachment != nil && sameDevice(top, blockDevice(v)) {
			st = top
			fstype := top.FSType
			v.Staging = &store.MountRecord{Path: p, Device: blockDevice(v), FSType: fstype, MountID: top.ID, Owned: true}
			if rec != nil && rec.Staging != nil {
				v.Staging.DeviceBytes = rec.Staging.DeviceBytes
				keepOptions(v.Staging, *rec.Staging)
			}
		} else {
			log.Warn("staging path has a mount that is not this volume's device; left alone", "path", p, "source", top.Source)
		}
	}

	// Targets: a recorded or wanted target whose top mount shows our
	// staging filesystem is adopted; anything else there is not owned.
	var paths []string
	subPaths := map[string]string{}
	recorded := map[string]store.MountRecord{}
	if rec != nil {
		for _, t := range rec.Targets {
			if _, twin := recorded[t.Path]; twin {
				continue // a record that holds a target twice (written by older versions)
			}
			recorded[t.Path] = t
			paths = append(paths, t.Path)
			subPaths[t.Path] = t.SubPath
		}
	}
	if d != nil {
		for _, t := range d.Targets {
			if !slices.Contains(paths, t.Path) {
				paths = append(paths, t.Path)
				subPaths[t.Path] = t.SubPath
			}
		}
	}
	for tp, sub := range publishing {
		if !slices.Contains(paths, tp) {
			paths = append(paths, tp)
			subPaths[tp] = sub
		}
	}
	for _, tp := range paths {
		top := mounts.Top(tp)
		if top == nil {
			continue
		}
		if !mounts.SameSource(top, st, subPaths[tp]) && (v.Attachment == nil || !boundDevice(tp, v.Attachment.Device)) {
			continue
		}
		m := store.MountRecord{Path: tp, SubPath: subPaths[tp], ReadOnly: mountReadOnly(top), MountID: top.ID, Owned: true}
		if r, ok := recorded[tp]; ok {
			keepOptions(&m, r)
		}
		v.Targets = append(v.Targets, m)
	}
	if len(pending) > 0 {
		log.Info("reconstructed", "attached", v.Attachment != nil, "staged", v.Staging != nil, "targets", len(v.Targets))
	}
	return v
}

// desiredFromIntent rebuilds, from an attach intent's inputs, enough of
// a volume to find what it attached.
func desiredFromIntent(in store.Intent) *Desired {
	var src manifest.Source
	if err := json.Unmarshal([]byte(in.Inputs["source"]), &src); err != nil || src.Driver() == "" {
		return nil
	}
	return &Desired{Name: in.Volume, Driver: src.Driver(), Spec: &manifest.VolumeSpec{Source: src}, Absent: true}
}

// keepOptions carries over what a record says a mount was made with
// when the kernel shows that very mount: mountinfo cannot tell it (it
// shows the filesystem's options, not the manifest's words). A remount
// left uncertain by a crash is simply done again: it is idempotent.
func keepOptions(m *store.MountRecord, rec store.MountRecord) {
	if rec.MountID == m.MountID {
		m.Options, m.Refused = rec.Options, rec.Refused
	}
}

func mountReadOnly(m *mountinfo.Info) bool { return hasOption(m.Options, "ro") }

func hasOption(opts, want string) bool {
	start := 0
	for i := 0; i <= len(opts); i++ {
		if i == len(opts) || opts[i] == ',' {
			if opts[start:i] == want {
				return true
			}
			start = i + 1
		}
	}
	return false
}

// verify is the resync's drift check: records are compared with the
// kernel and corrected, so that what vanished behind our back is put
// back by the next pass. Volumes with a running operation are skipped
// (only the reconciler starts operations, and it is the caller).
func (a *Agent) verify(ctx context.Context) {
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
			if att, err := a.attacher(fixed.Attachment.Driver); err == nil {
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
	a.detect(mounts)
}

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/moby/sys/mountinfo"

	"github.com/volumed/volumed/store"
)

// startView is what a start reads of the kernel once and every volume's
// probe shares: a probe that read the kernel again per volume was most
// of a restart.
type startView struct {
	mounts     MountTable
	ownedLists map[string][]store.Attachment // what carries our marker, by source kind
	strays     map[string]bool               // drivers with marked attachments no record names
	holders    map[string]string             // identity -> the volume whose record holds it
	// listed: the owned attachments by kind, device and identity; a
	// scan of the lists for each volume was quadratic in the volumes.
	listed map[ownedKey]bool
}

type ownedKey struct{ kind, device, identity string }

func (kv *startView) isListed(at store.Attachment) bool {
	return kv.listed[ownedKey{at.Kind, at.Device, at.Identity}]
}

// kernelRead is what a start reads of the kernel for every volume at
// once: the mount table and what carries our marker, by source kind.
type kernelRead struct {
	mounts MountTable
	owned  map[string][]store.Attachment
	err    error
}

func (a *Agent) readKernel(ctx context.Context) kernelRead {
	mounts, err := a.cfg.Mounter.Mounts()
	if err != nil {
		return kernelRead{err: fmt.Errorf("read mount table: %w", err)}
	}
	return kernelRead{mounts: mounts, owned: a.listOwned(ctx)}
}

// readKernelAside is readKernel on a goroutine of its own, which start
// waits for after reading the manifests: neither needs the other, and a
// restart at 1000 volumes spent about as long in each, one after the
// other, on one core (docs/performance.md). Nothing acts on the kernel
// before start has both: no operation runs until the first pass.
func (a *Agent) readKernelAside(ctx context.Context) <-chan kernelRead {
	ch := make(chan kernelRead, 1)
	go func() { ch <- a.readKernel(ctx) }()
	return ch
}

// newStartView takes what carries our marker (owned) and who holds what.
func (a *Agent) newStartView(owned map[string][]store.Attachment, mounts MountTable, recs map[string]*store.Volume) *startView {
	kv := &startView{mounts: mounts, ownedLists: owned, strays: map[string]bool{}, holders: map[string]string{}, listed: map[ownedKey]bool{}}
	for name, r := range recs {
		if r.Attachment != nil {
			kv.holders[r.Attachment.Identity] = name
		}
	}
	for kind, list := range kv.ownedLists {
		for _, o := range list {
			kv.listed[ownedKey{kind, o.Device, o.Identity}] = true
			if kv.holders[o.Identity] == "" {
				kv.strays[kind] = true
			}
		}
	}
	return kv
}

// volumeClues is what the store, the intents and the manifests say of
// one volume at start-up; the kernel decides what of it is true.
type volumeClues struct {
	rec        *store.Volume
	desired    *Desired
	pending    []string          // operations a crash left uncertain
	publishing map[string]string // target -> subPath of publishes a crash caught
	mapUUID    string            // the LUKS2 UUID a mapping must map to be adopted
}

func (c volumeClues) kind() string {
	switch {
	case c.desired != nil:
		return c.desired.Kind
	case c.rec != nil:
		return c.rec.Kind
	}
	return ""
}

// probeVolume finds what of one volume is really in the kernel.
func (a *Agent) probeVolume(ctx context.Context, name string, c volumeClues, kv *startView) *store.Volume {
	v := &store.Volume{Name: name, Kind: c.kind()}
	d, rec := c.desired, c.rec
	log := a.cfg.Log.With("volume", name)

	v.Attachment = a.recordedAttachment(ctx, rec, kv, log)
	if v.Attachment == nil && d != nil && a.mayHaveUnrecorded(d.Kind, kv.ownedLists, kv.strays, c.pending) {
		v.Attachment = a.unrecordedAttachment(ctx, name, c, kv, log)
	}
	p := a.stagingPathOf(name, d, rec)
	if v.Attachment == nil && d != nil {
		// Our device still mounted at the volume's staging path is the
		// volume's, even when its image was deleted or moved away (so it
		// is not found by the file): adopting it keeps the data and stops
		// a second device (and a format) on whatever is at the path now.
		if o, ok := ownedAt(kv.ownedLists[d.Kind], kv.mounts.Top(p)); ok {
			v.Attachment = &o
			log.Info("adopting our attachment mounted at the staging path", "device", o.Device, "identity", o.Identity)
		}
	}
	if d.Encrypted() || (rec != nil && rec.Mapping != nil) || slices.Contains(c.pending, OpOpen) || slices.Contains(c.pending, OpEncrypt) {
		a.adoptMapping(ctx, name, v, rec, c.mapUUID)
	}
	st := a.adoptStaging(v, c, p, kv.mounts, log)
	v.Targets = adoptTargets(v, c, st, kv.mounts)
	if len(c.pending) > 0 {
		log.Info("reconstructed", "attached", v.Attachment != nil, "staged", v.Staging != nil, "targets", len(v.Targets))
	}
	return v
}

// recordedAttachment checks a recorded attachment by its identity.
func (a *Agent) recordedAttachment(ctx context.Context, rec *store.Volume, kv *startView, log *slog.Logger) *store.Attachment {
	if rec == nil || rec.Attachment == nil {
		return nil
	}
	if kv.isListed(*rec.Attachment) {
		// Seen in the kernel by this start's one pass over it.
		return rec.Attachment
	}
	att, err := a.attacher(rec.Attachment.Kind)
	if err != nil {
		return nil
	}
	dev, ok, err := att.Verify(ctx, *rec.Attachment)
	switch {
	case err != nil:
		log.Warn("cannot verify recorded attachment; keeping the record", "identity", rec.Attachment.Identity, "error", err)
		return rec.Attachment
	case ok:
		at := *rec.Attachment
		at.Device = dev
		return &at
	}
	log.Info("recorded attachment is gone", "identity", rec.Attachment.Identity)
	return nil
}

// unrecordedAttachment looks in the kernel for an attachment no record
// names: one carrying our marker is owned (the state file may have been
// lost, or we died between attaching and recording).
func (a *Agent) unrecordedAttachment(ctx context.Context, name string, c volumeClues, kv *startView, log *slog.Logger) *store.Attachment {
	d := c.desired
	att, err := a.attacher(d.Kind)
	if err != nil {
		return nil
	}
	found, err := att.Find(ctx, d)
	if err != nil {
		log.Warn("look for an existing attachment", "error", err)
	}
	f, ok := pick(found)
	if h := kv.holders[f.Identity]; ok && h != "" && h != name {
		// Two selectors may pick one disk: its holder keeps it.
		log.Warn("not adopting an attachment another volume holds", "identity", f.Identity, "holder", h)
		return nil
	}
	if !ok || !a.adoptable(att, name, a.stagingPathOf(name, d, c.rec), f, kv.mounts) {
		return nil
	}
	at := a.attachmentOf(d, f, slices.Contains(c.pending, OpAttach))
	log.Info("adopting attachment found in the kernel", "device", f.Device, "identity", f.Identity, "owned", at.Owned)
	a.notes.set(name, f.Note)
	return at
}

// adoptStaging adopts the mount at the staging path when it is the
// volume's device (the staging dir is ours alone) and returns it.
func (a *Agent) adoptStaging(v *store.Volume, c volumeClues, p string, mounts MountTable, log *slog.Logger) *mountinfo.Info {
	top := mounts.Top(p)
	if top == nil {
		return nil
	}
	d, rec := c.desired, c.rec
	stager, staged := a.cfg.Attachers[v.Kind].(Stager)
	switch {
	case staged && d != nil && v.Attachment != nil && stager.IsStaged(d, p):
		v.Staging = &store.MountRecord{Path: p, Device: v.Attachment.Device, FSType: v.Kind, MountID: top.ID, Owned: true}
	case v.Attachment != nil && sameDevice(top, blockDevice(v)):
		v.Staging = &store.MountRecord{Path: p, Device: blockDevice(v), FSType: top.FSType, MountID: top.ID, Owned: true}
		if rec != nil && rec.Staging != nil {
			v.Staging.DeviceBytes = rec.Staging.DeviceBytes
			keepOptions(v.Staging, *rec.Staging)
		}
	default:
		log.Warn("staging path has a mount that is not this volume's device; left alone", "path", p, "source", top.Source)
		return nil
	}
	return top
}

// adoptTargets adopts a recorded, wanted or being-published target
// whose top mount shows our staging filesystem; anything else there is
// not owned.
func adoptTargets(v *store.Volume, c volumeClues, st *mountinfo.Info, mounts MountTable) []store.MountRecord {
	var paths []string
	subPaths := map[string]string{}
	recorded := map[string]store.MountRecord{}
	add := func(path, sub string) {
		if _, seen := subPaths[path]; !seen {
			paths = append(paths, path)
			subPaths[path] = sub
		}
	}
	if c.rec != nil {
		for _, t := range c.rec.Targets {
			if _, twin := recorded[t.Path]; twin {
				continue // a record that holds a target twice (written by older versions)
			}
			recorded[t.Path] = t
			add(t.Path, t.SubPath)
		}
	}
	if c.desired != nil {
		for _, t := range c.desired.Targets {
			add(t.Path, t.SubPath)
		}
	}
	for tp, sub := range c.publishing {
		add(tp, sub)
	}
	var out []store.MountRecord
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
		out = append(out, m)
	}
	return out
}

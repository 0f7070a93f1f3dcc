package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// A disk known only by its path (no WWN, no serial) can be replaced by
// another between two boots, and an image file by another file: what is
// at the source's place then is not the volume's data. Each volume's
// filesystem UUID (and LUKS2 header UUID) is recorded when volumed
// formats it or first finds it, and a device that holds another one is
// never mounted, opened or formatted as the volume.

// ErrIdentityChanged marks an operation refused because the device holds
// another filesystem or LUKS header than the volume's.
var ErrIdentityChanged = errors.New("identity changed")

// identities is the volumes' recorded identities: loaded at start-up,
// each change written durably before it is taken into memory.
type identities struct {
	store identityStore
	// yield gives up the volume's executor slot while its identity's
	// commit is waited for (Executor.Yield), so that the identities of
	// many volumes coming up share commits; nil: nothing to give up.
	yield func(name string) (resume func())

	mu    sync.Mutex
	known map[string]store.Identity
}

func (ids *identities) load() error {
	m, err := ids.store.Identities()
	if err != nil {
		return err
	}
	ids.mu.Lock()
	ids.known = m
	ids.mu.Unlock()
	return nil
}

func (ids *identities) get(name string) *store.Identity {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if id, ok := ids.known[name]; ok {
		return &id
	}
	return nil
}

// learn records uuid as the volume's part on source (how: decide.HowFormatted
// or decide.HowAdopted); an identity of another source is replaced whole.
func (ids *identities) learn(name, source string, part decide.IdentityPart, uuid, how string) error {
	id := store.Identity{Volume: name, Source: source}
	if old := ids.get(name); old != nil && old.Source == source {
		id = *old
		id.UpdatedAt = time.Time{} // stamped anew by the store
	}
	part.Set(&id, uuid)
	id.How = how
	// Durable before it is taken into memory and acted on: queued to
	// ride a later commit, a crash right after (a volume adopted at
	// start-up and Ready at once, then a power cut) lost it, and the next
	// start learnt whatever disk the reboot put at the path.
	resume := func() {}
	if ids.yield != nil {
		resume = ids.yield(name)
	}
	err := ids.store.PutIdentity(id)
	resume()
	if err != nil {
		return err
	}
	ids.mu.Lock()
	if ids.known == nil {
		ids.known = map[string]store.Identity{}
	}
	ids.known[name] = id
	ids.mu.Unlock()
	return nil
}

func (ids *identities) forget(name string) error {
	if ids.get(name) == nil {
		return nil
	}
	if err := ids.store.DeleteIdentity(name); err != nil {
		return err
	}
	ids.mu.Lock()
	delete(ids.known, name)
	ids.mu.Unlock()
	return nil
}

// checkIdentity compares what is on the volume's device dev with the
// volume's recorded identity: it learns what is there when nothing is
// recorded, and refuses another one (or a blank device where the volume
// had one) with the IdentityChanged condition naming both.
func (a *Agent) checkIdentity(d *Desired, dev string, part decide.IdentityPart, seen string, blank bool) error {
	known := a.idents.get(d.Name)
	switch decide.Identity(known, d.Caps.Key, part, seen, blank) {
	case decide.IdentityLearn:
		if err := a.idents.learn(d.Name, d.Caps.Key, part, seen, decide.HowAdopted); err != nil {
			return fmt.Errorf("record the %s UUID of %s: %w", part, d.Name, err)
		}
		a.cfg.Log.Info("identity recorded", "volume", d.Name, "what", part.String(), "uuid", seen, "device", dev)
	case decide.IdentityChanged:
		was := part.Of(*known)
		now := "none (the device is blank)"
		if !blank {
			now = seen
		}
		msg := fmt.Sprintf("%s (%s) holds %s UUID %s, but volume %s's %s is UUID %s (%s %s): another disk or image sits where the volume's was; volumed neither mounts, opens nor formats it. Put the volume's own back; or, if this one is meant, take the volume down (state: absent, or remove its manifest), then bring it back, and it is adopted",
			dev, d.Caps.Key, part, now, d.Name, part, was, known.How, known.UpdatedAt.Format("2006-01-02 15:04:05 MST"))
		a.conds.Set(d.Name, CondIdentityChanged, part.Reason(), msg)
		return fmt.Errorf("%s: %w: %s UUID %s is not the volume's %s", dev, ErrIdentityChanged, part, now, was)
	}
	a.conds.Clear(d.Name, CondIdentityChanged)
	return nil
}

// checkFilesystemIdentity reads the filesystem UUID on dev (none when
// the device is blank and about to be formatted) and checks it.
func (a *Agent) checkFilesystemIdentity(ctx context.Context, d *Desired, dev string, blank bool) error {
	seen := ""
	if !blank {
		info, err := a.cfg.FS.Inspect(ctx, dev)
		if err != nil {
			return fmt.Errorf("read the filesystem UUID of %s: %w", dev, err)
		}
		seen = info.UUID
	}
	return a.checkIdentity(d, dev, decide.PartFilesystem, seen, blank)
}

// inspectBound bounds the blkid run of learnMounted.
const inspectBound = 30 * time.Second

// learnMounted is the first sight of a volume found in place (adopted
// at start-up, or mounted by a volumed that kept no identities): what it
// is mounted from is its identity from now on. A volume whose identity
// is known costs nothing here; the check proper is at mount and open.
func (a *Agent) learnMounted(d *Desired, rec *store.Volume) {
	if d == nil || !d.Wanted() || rec.Attachment == nil || (rec.Attachment.Source != "" && rec.Attachment.Source != d.Caps.Key) {
		return
	}
	known := a.idents.get(d.Name)
	if m := rec.Mapping; m != nil && decide.RecordedFor(known, d.Caps.Key, decide.PartLUKS) == "" {
		_ = a.checkIdentity(d, rec.Attachment.Device, decide.PartLUKS, m.UUID, false)
	}
	st := rec.Staging
	if st == nil || d.Spec.Filesystem == nil || decide.RecordedFor(known, d.Caps.Key, decide.PartFilesystem) != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), inspectBound)
	defer cancel()
	info, err := a.cfg.FS.Inspect(ctx, st.Device)
	if err != nil {
		a.cfg.Log.Warn("filesystem UUID of a mounted volume unread; tried again at the next check", "volume", d.Name, "device", st.Device, "error", err)
		return
	}
	_ = a.checkIdentity(d, st.Device, decide.PartFilesystem, info.UUID, false)
}

// learnFormatted records the UUID volumed just gave a new filesystem or
// header. A failure is logged, not returned: the format is done, and the
// next mount learns what is there.
func (a *Agent) learnFormatted(d *Desired, part decide.IdentityPart, uuid string) {
	if err := a.idents.learn(d.Name, d.Caps.Key, part, uuid, decide.HowFormatted); err != nil {
		a.cfg.Log.Warn("identity not recorded; it is learnt at the next mount", "volume", d.Name, "what", part.String(), "error", err)
	}
}

// forgetIdentityIfGone drops the identity of a volume detached because
// nothing wants it any more (its manifest or CSI record is gone, or says
// state: absent): brought back, it adopts what it finds. A detach for
// the network hold (shutdown --network) keeps it.
func (a *Agent) forgetIdentityIfGone(name string) {
	if d := a.manifests.merged(a.external)[name]; d != nil && d.Wanted() {
		return
	}
	if err := a.idents.forget(name); err != nil {
		a.cfg.Log.Warn("identity of a volume taken down not forgotten", "volume", name, "error", err)
	}
}

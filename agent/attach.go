// The attach operation and who owns a shared session.

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

func sourceInputs(d *Desired) map[string]string {
	b, _ := json.Marshal(d.Spec.Source)
	return map[string]string{"source": string(b)}
}

func (a *Agent) opAttach(ctx context.Context, d *Desired) error {
	att, err := a.attacher(d.Kind)
	if err != nil {
		return err
	}
	err = a.state.Do(d.Name, d.Kind, OpAttach, sourceInputs(d), func(rec *store.Volume) error {
		found, err := att.Find(ctx, d)
		if err != nil {
			return err
		}
		if f, ok := pick(found); ok {
			if err := a.heldByOther(d.Name, f); err != nil {
				return err
			}
			if err := a.refuseInUse(att, d.Name, f); err != nil {
				return err
			}
			rec.Attachment = a.attachmentOf(d, f, false)
			a.notes.set(d.Name, f.Note)
			return nil
		}
		if len(found) > 0 {
			return fmt.Errorf("the source is already attached as %s by something other than volumed; left alone", found[0].Device)
		}
		if err := a.stagingFree(d); err != nil {
			return err
		}
		f, err := a.attach(ctx, att, d)
		if err != nil {
			return err
		}
		if err := a.heldByOther(d.Name, f); err != nil {
			return err
		}
		if err := a.refuseInUse(att, d.Name, f); err != nil {
			return err
		}
		rec.Attachment = a.attachmentOf(d, f, false)
		a.notes.set(d.Name, f.Note)
		return nil
	})
	if p, known := activationProblem(d.Name, err); known {
		a.apply(d.Name, CondActivationFailed, p, nil)
	}
	a.waits.attached(d.Name, err)
	return err
}

// attach hands a Coplanner the other wanted volumes of its driver.
func (a *Agent) attach(ctx context.Context, att Attacher, d *Desired) (Found, error) {
	cp, ok := att.(Coplanner)
	if !ok {
		return att.Attach(ctx, d)
	}
	var others []*Desired
	for n, o := range a.desiredSnapshot() {
		if n != d.Name && o.Kind == d.Kind && o.Wanted() {
			others = append(others, o)
		}
	}
	slices.SortFunc(others, func(x, y *Desired) int { return strings.Compare(x.Name, y.Name) })
	return cp.AttachAmong(ctx, d, others)
}

// heldByOther refuses an attachment another volume has recorded: two
// selectors (CEL disk expressions) may pick one disk, which no claim
// checked at load time can see; the volume that recorded it first keeps it.
func (a *Agent) heldByOther(name string, f Found) error {
	if n := a.state.Holder(f.Identity, name); n != "" {
		return fmt.Errorf("%s (%s) is already volume %s's; two volumes never share it", f.Device, f.Identity, n)
	}
	return nil
}

// refuseInUse refuses a device volumed did not make that something
// outside volumed uses: it is asked only before the first attach, when
// nothing of volumed's can be using it (stagingFree, heldByOther).
func (a *Agent) refuseInUse(att Attacher, name string, f Found) error {
	c, ok := att.(InUseChecker)
	if !ok || f.Owned {
		return nil
	}
	p, err := c.InUse(f.Device)
	if err != nil {
		return fmt.Errorf("check whether %s is in use: %w", f.Device, err)
	}
	a.apply(name, CondInUse, p, nil)
	if p != nil {
		// Its holder going (a dm table removed, a mapping closed) may
		// free it; a device appearing cannot.
		return &Waiting{For: Awaited{Release: true}, Err: errors.New(p.Message)}
	}
	return nil
}

// adoptable: a device found at start-up with no record may be adopted
// unless something outside volumed uses it; its own mount at the
// volume's staging path (a state file lost) is volumed's use. A refused
// one is left to the attach, which says why.
func (a *Agent) adoptable(att Attacher, name, staging string, f Found, mounts MountTable) bool {
	c, ok := att.(InUseChecker)
	if !ok || f.Owned {
		return true
	}
	if top := mounts.Top(staging); top != nil && sameDevice(top, f.Device) {
		return true
	}
	p, err := c.InUse(f.Device)
	if err != nil || p != nil {
		a.cfg.Log.Warn("not adopting a device used outside volumed", "volume", name, "device", f.Device, "error", err)
		return false
	}
	return true
}

// stagingFree refuses a new attachment while the volume's staging path
// is still mounted: that is the volume's data on a device the record lost
// (an image moved away under it), and a second device on whatever the
// path names now would be formatted and mounted beside it.
func (a *Agent) stagingFree(d *Desired) error {
	if d.Block {
		return nil // never staged
	}
	p := a.stagingPathOf(d.Name, d, nil)
	if pt, err := a.cfg.Mounter.At(p); err != nil || !pt.Root {
		return nil
	}
	return fmt.Errorf("the staging path %s is still mounted%s: not attaching a second device for this volume; unmount it, or restart volumed to adopt it", p, a.describeMount(p))
}

// pick chooses, among attachments found in place, one the volume may
// use: an owned one first, then one that may be shared.
func pick(found []Found) (Found, bool) {
	for _, f := range found {
		if f.Owned {
			return f, true
		}
	}
	for _, f := range found {
		if f.Reusable || f.Pinned {
			return f, true
		}
	}
	return Found{}, false
}

// attachmentOf records f for d, owned as decide.Owns says. interrupted:
// a crash caught volumed attaching d (known at start-up only).
func (a *Agent) attachmentOf(d *Desired, f Found, interrupted bool) *store.Attachment {
	key := sessionKey(d.Kind, f.Session)
	if f.Owned {
		a.sessions.add(key)
	}
	owned := decide.Owns(decide.Claim{
		Made: f.Owned, Reusable: f.Reusable, Pinned: f.Pinned,
		Session: f.Session, SessionMade: a.sessions.has(key), AttachInterrupted: interrupted,
	}, a.sharers(d.Name, d.Kind))
	return &store.Attachment{
		Kind: d.Kind, Device: f.Device, Identity: f.Identity, Session: f.Session,
		Owned: owned, Pinned: f.Pinned, Source: d.Caps.Key,
		Created: f.Created,
	}
}

// sharers are the attachments other volumes hold through the same driver.
func (a *Agent) sharers(name, kind string) []store.Attachment {
	return a.state.Attachments(name, kind)
}

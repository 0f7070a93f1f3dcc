package lvm

import (
	"context"
	"errors"
	"fmt"

	"github.com/volumed/volumed/agent"
	diskdrv "github.com/volumed/volumed/drivers/disk"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/internal/size"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// attacher adapts drivers/lvm. The core's attach intent is on disk
// before Attach runs lvcreate, so a crash anywhere in it is resolved at
// start-up by Find, which finds the LV by its tag whatever state it was
// left in (not yet made: made again; made, not active: Attach activates
// it), never a second one.
type attacher struct {
	kind.LocalInUse // an LV volumed did not create may be in use elsewhere
	tool            lvmdrv.Tool
	sysRoot         string         // "" = /sys
	disks           diskdrv.Lister // the disks a volume group is made from
}

// want is the LV the volume asks for. A volume rebuilt from an intent
// keeps the size as written, not parsed.
func want(d *agent.Desired) (lvmdrv.Want, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil {
		return lvmdrv.Want{}, err
	}
	w := lvmdrv.Want{Volume: d.Name, VG: s.VolumeGroup, Name: s.Name, Size: s.size, Type: s.Type, ThinPool: s.ThinPool,
		Stripes: s.Stripes, StripeSize: s.stripeSize, Mirrors: s.Mirrors, Extents: s.Extents}
	if w.Name == "" {
		w.Name = d.Name
	}
	if s.Grow {
		w.Follow, w.Extents = true, lvmdrv.FollowExtents
	}
	if w.Size == 0 && s.Size != "" {
		if w.Size, err = size.Parse(s.Size); err != nil {
			return lvmdrv.Want{}, fmt.Errorf("volume %s: lvm size: %w", d.Name, err)
		}
	}
	if w.StripeSize == 0 && s.StripeSize != "" {
		if w.StripeSize, err = size.Parse(s.StripeSize); err != nil {
			return lvmdrv.Want{}, fmt.Errorf("volume %s: lvm stripeSize: %w", d.Name, err)
		}
	}
	return w, nil
}

// decide reads the VG and decides.
func (a attacher) decide(ctx context.Context, w lvmdrv.Want) (lvmdrv.Step, error) {
	lvs, found, err := a.tool.LVs(ctx, w.VG)
	if err != nil {
		return lvmdrv.Step{}, fmt.Errorf("volume %s, LV %s: %w", w.Volume, w.Ref(), err)
	}
	return lvmdrv.Decide(w, found, lvs), nil
}

func (a attacher) found(w lvmdrv.Want, s lvmdrv.Step) (agent.Found, error) {
	dev, err := lvmdrv.Node(a.sysRoot, s.LV)
	if err != nil {
		return agent.Found{}, fmt.Errorf("volume %s: %w", w.Volume, err)
	}
	return agent.Found{Device: dev, Identity: Identity(s.LV), Owned: s.Owned, Reusable: true}, nil
}

// Find returns the volume's LV when it is active.
func (a attacher) Find(ctx context.Context, d *agent.Desired) ([]agent.Found, error) {
	w, err := want(d)
	if err != nil {
		return nil, err
	}
	s, err := a.decide(ctx, w)
	if err != nil || s.Action != lvmdrv.Use {
		return nil, err
	}
	f, err := a.found(w, s)
	if err != nil {
		return nil, err
	}
	f.Note, err = a.adoptedNote(ctx, d)
	return []agent.Found{f}, err
}

// Attach does what Decide says: activates the volume's LV, or creates
// it; it waits or refuses (changing nothing) with Decide's reason.
func (a attacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	w, err := want(d)
	if err != nil {
		return agent.Found{}, err
	}
	a, note, err := a.inGroup(ctx, d, &w)
	if err != nil {
		return agent.Found{}, err
	}
	s, err := a.decide(ctx, w)
	if err != nil {
		return agent.Found{}, err
	}
	created := false
	switch s.Action {
	case lvmdrv.Use:
		f, err := a.found(w, s)
		f.Note = note
		return f, err
	case lvmdrv.Wait:
		// For the VG's disks (a PV appearing), its thin pool or the LV
		// activated by its owner (an LV of the VG appearing).
		return agent.Found{}, &agent.Waiting{For: agent.Awaited{AnyDisk: true, LVsOf: w.VG},
			Err: fmt.Errorf("volume %s, LV %s: %s", w.Volume, w.Ref(), s.Why)}
	case lvmdrv.Refuse:
		return agent.Found{}, fmt.Errorf("volume %s, LV %s: %s", w.Volume, w.Ref(), s.Why)
	case lvmdrv.Activate:
		err = notActivated(a.tool.Activate(ctx, s.LV))
	case lvmdrv.Create:
		if why := lvmdrv.CheckLVName(w.Name); why != "" {
			return agent.Found{}, fmt.Errorf("volume %s: LV name %q (the volume's; set source.lvm.name): %s", w.Volume, w.Name, why)
		}
		if err := a.room(ctx, w); err != nil {
			return agent.Found{}, err
		}
		created = true
		err = notActivated(a.tool.Create(ctx, w))
	}
	if err != nil {
		return agent.Found{}, fmt.Errorf("volume %s: %w", w.Volume, err)
	}
	if s, err = a.decide(ctx, w); err != nil {
		return agent.Found{}, err
	}
	if s.Action != lvmdrv.Use || !s.Owned {
		return agent.Found{}, fmt.Errorf("volume %s, LV %s: not active and tagged %s after lvm2 said it was (%s)", w.Volume, w.Ref(), lvmdrv.Tag(w.Volume), s.Action)
	}
	f, err := a.found(w, s)
	// A new LV holds only what lvcreate zeroed and wiped: blank by the
	// record, as a new image file is (docs/lvm.md says why).
	f.Created, f.Note = created, note
	return f, err
}

// byIdentity finds the recorded LV by its VG and UUID.
func (a attacher) byIdentity(ctx context.Context, at store.Attachment) (lvmdrv.LV, bool, error) {
	vg, uuid, err := ParseIdentity(at.Identity)
	if err != nil {
		return lvmdrv.LV{}, false, err
	}
	return a.tool.ByUUID(ctx, vg, uuid)
}

// Verify: the recorded LV is there and active. An inactive one (a
// reboot) is not attached: the attach that follows activates it.
func (a attacher) Verify(ctx context.Context, at store.Attachment) (string, bool, error) {
	lv, ok, err := a.byIdentity(ctx, at)
	if err != nil || !ok || !lv.Active {
		return "", false, err
	}
	dev, err := lvmdrv.Node(a.sysRoot, lv)
	return dev, err == nil, err
}

// Detach deactivates an LV volumed created (the core detaches only
// those): its data stays, and no device node of an unmanaged volume is
// left for something to mount by mistake. An LV that is open (mounted or
// held outside volumed) is left active, and the teardown says so.
func (a attacher) Detach(ctx context.Context, at store.Attachment) error {
	lv, ok, err := a.byIdentity(ctx, at)
	if err != nil || !ok || !lv.Active {
		return err
	}
	return kind.MarkBusy(a.tool.Deactivate(ctx, lv), lvmdrv.ErrBusy)
}

// notActivated hands lvm2's refusal to activate to the core as such: the
// volume gets ActivationFailed with lvm2's words.
func notActivated(err error) error {
	var ae *lvmdrv.ActivateError
	if errors.As(err, &ae) {
		return &agent.NotActivated{Reason: ae.Reason, Err: err}
	}
	return err
}

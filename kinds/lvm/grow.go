package lvm

import (
	"context"
	"fmt"

	"github.com/volumed/volumed/agent"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// rounded is w with its size as lvm2 makes it in w's VG: up to a whole
// extent (on each stripe).
func (a attacher) rounded(ctx context.Context, w lvmdrv.Want) (lvmdrv.Want, error) {
	vgs, err := a.tool.VGs(ctx)
	if err != nil {
		return w, fmt.Errorf("volume %s: %w", w.Volume, err)
	}
	for _, vg := range vgs {
		if vg.Name == w.VG {
			w.Size = lvmdrv.Round(w.Size, lvmdrv.Granule(w, vg.ExtentSize))
			return w, nil
		}
	}
	return w, fmt.Errorf("volume %s: volume group %s is not there", w.Volume, w.VG)
}

// Rounded is the manifest's size as lvm2 makes it (the core compares it
// with the LV's device).
func (a attacher) Rounded(ctx context.Context, d *agent.Desired, _ store.Attachment) (int64, error) {
	w, err := want(d)
	if err != nil {
		return 0, err
	}
	w, err = a.rounded(ctx, w)
	return w.Size, err
}

// Grow extends the volume's LV to the manifest's size with lvextend (the
// core then grows the filesystem from the kernel's sizes, so a crash
// between the two is finished by the next growth check). Only an LV
// volumed created is extended, never shrunk (lvmdrv.Extend).
func (a attacher) Grow(ctx context.Context, d *agent.Desired, at store.Attachment) error {
	w, err := want(d)
	if err != nil {
		return err
	}
	// A VG volumed keeps with grow: true takes a new blank disk first,
	// under this operation's intent, so the LV has room to grow into
	// (and a disk that appeared is taken in, Joinable, whatever the LV).
	if a, _, err = a.inGroup(ctx, d, &w); err != nil || w.Size == 0 && !w.Follow {
		// Sized by extents: made once, never resized to them again.
		return err
	}
	lv, ok, err := a.byIdentity(ctx, at)
	if err != nil {
		return fmt.Errorf("volume %s: %w", w.Volume, err)
	}
	if !ok {
		return fmt.Errorf("volume %s: its LV (%s) is gone", w.Volume, at.Identity)
	}
	if w.Follow {
		// The VG as it is now, after the vgextend above.
		if w.Size, err = a.followSize(ctx, w, lv); err != nil || w.Size == 0 {
			return err
		}
	} else if w, err = a.rounded(ctx, w); err != nil {
		return err
	}
	if _, err := a.tool.Grow(ctx, w, lv); err != nil {
		return fmt.Errorf("volume %s: %w", w.Volume, err)
	}
	return nil
}

// Joinable: a blank disk the selector picks is there to join the
// volume's VG, which volumed keeps with grow: true; the core's grow
// operation then takes it in (vgextend under its intent, in Grow).
//
// For an LV that follows its VG (grow), free extents in the VG are as
// much to take in: a VG extended by hand grows the LV at the next check.
func (a attacher) Joinable(ctx context.Context, d *agent.Desired, at store.Attachment) (bool, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil {
		return false, err
	}
	if s.Grow {
		if ok, err := a.followable(ctx, d, at); ok || err != nil {
			return ok, err
		}
	}
	if s.CreateVolumeGroup == nil || !s.CreateVolumeGroup.Grow {
		return false, nil
	}
	return groupKeeper{tool: a.tool, disks: a.disks}.joinable(ctx, s)
}

// followable: the volume's LV, which follows its VG, has free extents
// to take (lvmdrv.FollowSize).
func (a attacher) followable(ctx context.Context, d *agent.Desired, at store.Attachment) (bool, error) {
	w, err := want(d)
	if err != nil {
		return false, err
	}
	lv, ok, err := a.byIdentity(ctx, at)
	if err != nil || !ok {
		return false, err
	}
	n, err := a.followSize(ctx, w, lv)
	return n > 0, err
}

// followSize is lvmdrv.FollowSize over the VG's report.
func (a attacher) followSize(ctx context.Context, w lvmdrv.Want, lv lvmdrv.LV) (int64, error) {
	vgs, err := a.tool.VGs(ctx)
	if err != nil {
		return 0, fmt.Errorf("volume %s: %w", w.Volume, err)
	}
	for _, vg := range vgs {
		if vg.Name == lv.VG {
			return lvmdrv.FollowSize(w, lv, vg), nil
		}
	}
	return 0, nil
}

package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// refreshSizes asks the kernel, once per shared session or controller, to
// re-read sizes that a target may have changed. It costs a round trip to
// the target (an iscsiadm rescan), so it runs only at the resync, not on
// every size check.
func (a *Agent) refreshSizes(ctx context.Context) {
	done := map[string]bool{}
	for name, rec := range a.state.Snapshot() {
		at := rec.Attachment
		if at == nil || rec.Staging == nil {
			continue
		}
		r, ok := a.cfg.Attachers[at.Kind].(Refresher)
		key := sessionKey(at.Kind, at.Session)
		if !ok || (key != "" && done[key]) {
			continue
		}
		done[key] = true
		if err := r.Refresh(ctx, *at); err != nil {
			a.cfg.Log.Debug("refresh device size", "volume", name, "error", err)
		}
	}
}

// observeSizes reads the sizes decide.GrowNeeded compares: a stat and a
// sysfs read, plus one lvm2 report for a source that rounds its size
// (SizeRounder), so it is done only at resync, on device events and on
// manifest changes. A size that cannot be read is left unknown (0, -1),
// which never asks for growth, and the error is returned.
func (a *Agent) observeSizes(ctx context.Context, d *Desired, rec *store.Volume) (decide.Sizes, error) {
	s := decide.Sizes{Image: -1}
	if !decide.Placed(d, rec) {
		return s, nil
	}
	switch {
	case d.Caps.Size > 0 && d.Caps.ImageFile != "":
		if n, err := fileSize(d.Caps.ImageFile); err == nil {
			s.Image = n
		}
	case d.Caps.Size > 0:
		// The source is the attached device itself (an LV): the kernel's
		// size, so a grow cut short is seen and done again.
		n, err := a.cfg.FS.DeviceSize(rec.Attachment.Device)
		if err != nil {
			return s, fmt.Errorf("size of %s: %w", rec.Attachment.Device, err)
		}
		if r, ok := a.cfg.Attachers[rec.Attachment.Kind].(SizeRounder); ok {
			if s.Want, err = r.Rounded(ctx, d, *rec.Attachment); err != nil {
				return s, err
			}
		}
		s.Image = n
	}
	if j, ok := a.cfg.Attachers[rec.Attachment.Kind].(Joiner); ok {
		var err error
		if s.Join, err = j.Joinable(ctx, d, *rec.Attachment); err != nil {
			return s, err
		}
	}
	if _, staged := a.cfg.Attachers[rec.Attachment.Kind].(Stager); !staged {
		n, err := a.growableSize(rec)
		if err != nil {
			return s, err
		}
		s.Device = n
	}
	return s, nil
}

// opGrow makes the device as large as the manifest wants (a loop image
// extended, never shrunk) and grows the mounted filesystem onto it.
func (a *Agent) opGrow(ctx context.Context, d *Desired) error {
	err := a.grow(ctx, d)
	a.growResult(d.Name, err)
	return err
}

func (a *Agent) grow(ctx context.Context, d *Desired) error {
	rec := a.state.Get(d.Name)
	if !decide.Placed(d, rec) {
		return errRetryNow
	}
	dev := blockDevice(rec)
	inputs := map[string]string{"device": dev}
	return a.state.Do(d.Name, d.Kind, OpGrow, inputs, func(rec *store.Volume) error {
		if r, ok := a.cfg.Attachers[d.Kind].(Resizer); ok {
			if err := r.Grow(ctx, d, *rec.Attachment); err != nil {
				return err
			}
		}
		if rec.Mapping != nil {
			if err := a.resizeMapping(ctx, d, rec); err != nil {
				return err
			}
		}
		size, err := a.cfg.FS.DeviceSize(dev)
		if err != nil {
			return fmt.Errorf("size of %s: %w", dev, err)
		}
		// DeviceBytes is the size the filesystem was last fitted to: it
		// moves only when the filesystem is grown, so turning grow on
		// later still grows it.
		if fs := d.Spec.Filesystem; fs != nil && fs.Grow && rec.Staging != nil {
			if size > rec.Staging.DeviceBytes {
				if err := a.cfg.FS.Grow(ctx, fs.Type, dev, rec.Staging.Path); err != nil {
					return err
				}
				a.cfg.Log.Info("filesystem grown", "volume", d.Name, "device", dev, "from", rec.Staging.DeviceBytes, "to", size)
			}
			rec.Staging.DeviceBytes = size
		}
		return nil
	})
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

// shrinkRefused says, on the volume, that its manifest asks for less
// than its source has: nothing shrinks it, and the size asked is not
// what the volume has.
func (a *Agent) shrinkRefused(s decide.Shrink) {
	a.apply(s.Volume, CondGrowFailed, &Problem{Reason: "ShrinkRefused", Message: fmt.Sprintf(
		"volume %s: the manifest asks for %d bytes, its source has %d: volumed never shrinks a volume (the filesystem on it would be cut); set the size to at least %d bytes, or make a new volume",
		s.Volume, s.Want, s.Have, s.Have)}, nil)
}

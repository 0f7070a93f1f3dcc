package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// opPublish binds the volume (its staging mount, or a raw block
// volume's device node) at a target. Its intent is durable first: a bind
// mount does not name its owner, and when a crash loses the outcome and
// no manifest names the target any more, the intent is what tells
// start-up (probeVolume) that the bind there is ours to take down.
func (a *Agent) opPublish(d *Desired, t DesiredTarget) error {
	return a.state.Do(d.Name, d.Kind, OpPublish, publishInputs(t), func(rec *store.Volume) error {
		if decide.HasTarget(rec, t.Path) {
			// Planned from a snapshot taken before the publish that
			// recorded it finished: recording it twice would leave a
			// stale twin behind.
			return nil
		}
		if t.Block {
			return a.publishBlock(d, t, rec)
		}
		src, err := a.publishSource(rec, t.SubPath)
		if errors.Is(err, errStagingGone) {
			rec.Staging = nil // drift: the next pass mounts it again
			return errRetryNow
		}
		if err != nil {
			return err
		}
		if tp, err := a.cfg.Mounter.At(t.Path); err == nil && tp.Root {
			if tp.SameFile(src) {
				rec.Targets = append(rec.Targets, targetRecord(tp.MountID, t, nil))
				return nil
			}
			return fmt.Errorf("target %s already has a mount%s that volumed did not make; left alone", t.Path, a.describeMount(t.Path))
		}
		if err := a.refuseNonEmpty(t); err != nil {
			return err
		}
		if err := a.cfg.Mounter.EnsureDir(t.Path); err != nil {
			return err
		}
		o := decide.BindOptionsFor(d, t)
		if err := a.cfg.Mounter.Bind(rec.Staging.Path, t.SubPath, t.Path, o); err != nil {
			return err
		}
		tp, err := a.cfg.Mounter.At(t.Path)
		if err != nil {
			return err
		}
		if !tp.Root || !tp.SameFile(src) {
			return fmt.Errorf("bind mount at %s succeeded but the kernel does not show it", t.Path)
		}
		rec.Targets = append(rec.Targets, targetRecord(tp.MountID, t, decide.BindWords(o)))
		return nil
	})
}

// publishInputs is what a publish's intent keeps for reconstruction: the
// target and the part of the volume bound there.
func publishInputs(t DesiredTarget) map[string]string {
	in := map[string]string{"target": t.Path}
	if t.SubPath != "" {
		in["subPath"] = t.SubPath
	}
	return in
}

// rawBlockDevice is the device node a raw block volume's targets bind:
// its dm-crypt mapping when encrypted (false until it is open), else its
// attachment.
func rawBlockDevice(d *Desired, rec *store.Volume) (string, bool) {
	switch {
	case rec.Attachment == nil:
		return "", false
	case d.Encrypted() && rec.Mapping == nil:
		return "", false
	}
	return blockDevice(rec), true
}

// publishBlock binds the volume's device node at the target, a file.
func (a *Agent) publishBlock(d *Desired, t DesiredTarget, rec *store.Volume) error {
	dev, ok := rawBlockDevice(d, rec)
	if !ok {
		return errRetryNow
	}
	src, err := a.cfg.Mounter.At(dev)
	if err != nil {
		return fmt.Errorf("device %s: %w", dev, err)
	}
	if tp, err := a.cfg.Mounter.At(t.Path); err == nil && tp.Root {
		if tp.SameFile(src) {
			rec.Targets = append(rec.Targets, targetRecord(tp.MountID, t, nil))
			return nil
		}
		return fmt.Errorf("target %s already has a mount%s that volumed did not make; left alone", t.Path, a.describeMount(t.Path))
	}
	o := decide.BindOptionsFor(d, t)
	if err := a.cfg.Mounter.BindDevice(dev, t.Path, o); err != nil {
		return err
	}
	tp, err := a.cfg.Mounter.At(t.Path)
	if err != nil {
		return err
	}
	if !tp.Root || !tp.SameFile(src) {
		return fmt.Errorf("bind mount of %s at %s succeeded but the kernel does not show it", dev, t.Path)
	}
	rec.Targets = append(rec.Targets, targetRecord(tp.MountID, t, decide.BindWords(o)))
	return nil
}

// ErrNotEmpty marks a mount refused because its directory holds
// entries the mount would hide.
var ErrNotEmpty = errors.New("not empty")

// refuseNonEmpty: a mount hides what its directory holds, which is
// seldom meant (a path typed wrong, data written before the volume came
// up), so the manifest must ask for it.
func (a *Agent) refuseNonEmpty(t DesiredTarget) error {
	if t.AllowNonEmpty {
		return nil
	}
	return a.refuseEntries("target", t.Path, "set allowNonEmpty: true on the mount to allow it")
}

// refuseNonEmptyStaging: a staging path the kubelet chose (a CSI
// volume's) is refused as a manifest's target is when it holds
// anything; staging/<volume> is volumed's own and never asked about.
func (a *Agent) refuseNonEmptyStaging(d *Desired) error {
	if d.StagingPath == "" {
		return nil
	}
	return a.refuseEntries("staging path", d.StagingPath, "empty it or stage the volume elsewhere")
}

func (a *Agent) refuseEntries(what, p, advice string) error {
	n, err := a.cfg.Mounter.Entries(p)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, p, err)
	}
	if n == 0 {
		return nil
	}
	entries := "entries"
	if n == 1 {
		entries = "entry"
	}
	return fmt.Errorf("%s %s is %w: mounting would hide %d %s; %s", what, p, ErrNotEmpty, n, entries, advice)
}

var errStagingGone = errors.New("staging mount gone")

// publishSource checks that the staging mount recorded is still there
// and returns the directory a target of subPath binds.
func (a *Agent) publishSource(rec *store.Volume, subPath string) (MountPoint, error) {
	if rec.Staging == nil {
		return MountPoint{}, errStagingGone
	}
	st, err := a.cfg.Mounter.At(rec.Staging.Path)
	if err != nil || !st.Root || st.MountID != rec.Staging.MountID {
		return MountPoint{}, errStagingGone
	}
	if subPath == "" {
		return st, nil
	}
	src, err := a.cfg.Mounter.At(filepath.Join(rec.Staging.Path, subPath))
	if err != nil {
		return MountPoint{}, fmt.Errorf("subPath %s in the volume: %w", subPath, err)
	}
	return src, nil
}

// describeMount names what is mounted at p, for error messages.
func (a *Agent) describeMount(p string) string {
	if m, err := a.mountInfoAt(p); err == nil && m != nil {
		return fmt.Sprintf(" of %s (%s)", m.Source, m.FSType)
	}
	return ""
}

func targetRecord(id int, t DesiredTarget, opts []string) store.MountRecord {
	return store.MountRecord{Path: t.Path, SubPath: t.SubPath, ReadOnly: t.ReadOnly, MountID: id, Owned: true, Options: opts}
}

func (a *Agent) opUnpublish(ctx context.Context, name, kind, path string) error {
	// A target is ours when it binds our staging mount: no intent.
	return a.state.DoNamed(name, kind, OpUnpublish, func(rec *store.Volume) error {
		i := slices.IndexFunc(rec.Targets, func(t store.MountRecord) bool { return t.Path == path })
		if i < 0 {
			return nil
		}
		t := rec.Targets[i]
		if tp, err := a.cfg.Mounter.At(path); err == nil && tp.Root {
			if tp.MountID != t.MountID {
				if src, err := a.publishSource(rec, t.SubPath); err != nil || !tp.SameFile(src) {
					return fmt.Errorf("something else%s is mounted on top of %s; left alone", a.describeMount(path), path)
				}
			}
			if err := a.unmount(ctx, name, path); err != nil {
				return err
			}
		}
		rec.Targets = slices.Delete(rec.Targets, i, i+1)
		return nil
	})
}

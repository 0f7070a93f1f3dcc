// The mount_device operation: probe, format when the rules allow, mount
// the filesystem at the staging path (or stage a source that is not a
// block device).

package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/moby/sys/mountinfo"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// opMountDevice probes the device, formats it only when it is blank and
// the manifest allows, and mounts it at the staging path. A filesystem
// is never made again over one that exists, except the half-made one of
// an interrupted format, proven by its UUID and its own checker.
func (a *Agent) opMountDevice(ctx context.Context, d *Desired) error {
	rec := a.state.Get(d.Name)
	if rec == nil || rec.Attachment == nil {
		return errRetryNow
	}
	if stager, ok := a.cfg.Attachers[d.Kind].(Stager); ok {
		return a.stageSource(ctx, d, stager)
	}
	if err := a.formatRefusedFor(d); err != nil {
		return err
	}
	if d.Encrypted() && rec.Mapping == nil {
		return errRetryNow // closed since the plan: the next pass opens it
	}
	dev := blockDevice(rec)
	fs := d.Spec.Filesystem
	if fs == nil {
		return fmt.Errorf("no filesystem block: a raw block volume is never staged")
	}
	if pt, err := a.cfg.Mounter.At(a.stagingPathOf(d.Name, d, nil)); err == nil && pt.Root {
		// Mounted already: whatever format there was had finished.
		a.formats.interrupted.clear(d.Name)
		return a.mountStaging(ctx, d, dev, false)
	}
	if err := a.refuseNonEmptyStaging(d); err != nil {
		return err
	}
	sigs, err := a.cfg.FS.Probe(ctx, dev)
	if err != nil {
		return fmt.Errorf("probe %s: %w", dev, err)
	}
	fsUUID := uuid.NewString()
	format := func(force bool) error {
		return a.run(ctx, d.Name, d.Kind, OpFormat, func(ctx context.Context) error {
			inputs := map[string]string{"device": dev, "fsType": fs.Type, "uuid": fsUUID}
			return a.state.Do(d.Name, d.Kind, OpFormat, inputs, func(rec *store.Volume) error {
				if rec.Attachment != nil {
					rec.Attachment.Created = false // formatted: no longer blank by the record
				}
				return a.cfg.FS.Mkfs(ctx, dev, fs.Type, fsUUID, mkfsArgs(fs, force))
			})
		})
	}
	redo, err := a.resumeFormat(ctx, d, dev, sigs)
	if err != nil {
		return err
	}
	mkfs, force, err := decide.Mkfs(redo, sigs, d, decide.ReadOnlySource(d))
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	if err := a.checkFilesystemIdentity(ctx, d, dev, mkfs && !redo); err != nil {
		return err
	}
	if mkfs && !force {
		if err := a.checkBlank(ctx, d.Name, dev, a.ownWrites(d)); err != nil {
			return fmt.Errorf("%s: %w", dev, err)
		}
	} else if !mkfs {
		a.conds.Clear(d.Name, CondNotBlank)
	}
	if mkfs {
		if err := format(force); err != nil {
			return a.formatFailed(ctx, d, dev, err)
		}
		a.learnFormatted(d, decide.PartFilesystem, fsUUID)
	}
	a.formats.interrupted.clear(d.Name)
	err = a.mountStaging(ctx, d, dev, mkfs)
	a.noteMountResult(d, err)
	return err
}

// noteMountResult keeps the condition that says a mount is refused by
// the manifest rather than by the filesystem.
func (a *Agent) noteMountResult(d *Desired, err error) {
	if !errors.Is(err, ErrMountConfig) {
		a.conds.Clear(d.Name, CondMountConfig)
		return
	}
	a.conds.Set(d.Name, CondMountConfig, "MountOptionRefused",
		fmt.Sprintf("%v. The filesystem is untouched; fix filesystem.mountOptions in %s", err, d.File))
}

// mountStaging mounts dev at staging/<volume>. Its intent is durable
// only after a format in the same operation (formatted): until the mount
// is recorded, the format's own outcome may not be on disk, and a power
// cut would leave a format intent whose filesystem a mount wrote to, but
// whose superblock need not say so yet. Otherwise the kernel is the
// record: the mount sits at a path that names the volume, on a device
// whose attachment is recorded or has its intent on disk, and start-up
// adopts it from there (probeVolume), so the mount is never done twice
// and never leaked; its outcome rides the next commit.
func (a *Agent) mountStaging(ctx context.Context, d *Desired, dev string, formatted bool) error {
	fs := d.Spec.Filesystem
	p := a.stagingPathOf(d.Name, d, nil)
	do := func(act func(rec *store.Volume) error) error {
		return a.state.DoNamed(d.Name, d.Kind, OpMountDevice, act)
	}
	if formatted || p != a.stagingPath(d.Name) {
		// A path the kubelet chose does not name the volume: only the
		// intent tells a restart that the mount there is ours.
		do = func(act func(rec *store.Volume) error) error {
			return a.state.Do(d.Name, d.Kind, OpMountDevice, map[string]string{"device": dev}, act)
		}
	}
	return do(func(rec *store.Volume) error {
		if rec.Attachment != nil {
			rec.Attachment.Created = false // holds a filesystem now
		}
		if pt, err := a.cfg.Mounter.At(p); err == nil && pt.Root {
			// Mounted already (e.g. by a run that died before recording it).
			top, err := a.mountInfoAt(p)
			if err != nil {
				return err
			}
			if top == nil || !sameDevice(top, dev) {
				return fmt.Errorf("staging path %s has a mount that volumed did not make; left alone", p)
			}
			rec.Staging = stagingRecord(p, top.ID, dev, fs.Type, nil)
			rec.Staging.DeviceBytes = a.fittedSize(ctx, d.Name, dev)
			return nil
		}
		if err := a.cfg.Mounter.EnsureDir(p); err != nil {
			return err
		}
		opts := decide.StagingOptions(d)
		if err := a.cfg.Mounter.MountDevice(dev, p, fs.Type, opts); err != nil {
			return err
		}
		pt, err := a.cfg.Mounter.At(p)
		if err != nil {
			return err
		}
		if !pt.Root {
			return fmt.Errorf("mount of %s at %s succeeded but the kernel does not show it", dev, p)
		}
		rec.Staging = stagingRecord(p, pt.MountID, dev, fs.Type, opts)
		rec.Staging.DeviceBytes = a.fittedSize(ctx, d.Name, dev)
		return nil
	})
}

// fittedSize is the size a filesystem just mounted on dev is fitted to,
// for the record: the device's, or the filesystem's own when its
// superblock says it is smaller (the device grew and the grow of the
// filesystem never ran: a power cut between the two), so the growth
// check still owes it a grow. When the device's size cannot be read the
// mount still stands (its record must not be lost): the record keeps 0,
// the failure is logged, and the next growth check reads the size again.
func (a *Agent) fittedSize(ctx context.Context, name, dev string) int64 {
	n, err := a.cfg.FS.DeviceSize(dev)
	if err != nil {
		a.cfg.Log.Warn("size of the device unknown; growth is decided at the next check", "volume", name, "device", dev, "error", err)
		return 0
	}
	if info, err := a.cfg.FS.Inspect(ctx, dev); err == nil && info.Bytes > 0 && info.Bytes < n {
		return info.Bytes
	}
	return n
}

// stageSource puts a source that is not a block device (a directory, a
// tmpfs) at the staging path.
func (a *Agent) stageSource(ctx context.Context, d *Desired, stager Stager) error {
	return a.state.Do(d.Name, d.Kind, OpMountDevice, nil, func(rec *store.Volume) error {
		p := a.stagingPathOf(d.Name, d, nil)
		if pt, err := a.cfg.Mounter.At(p); err == nil && pt.Root {
			if !stager.IsStaged(d, p) {
				return fmt.Errorf("staging path %s has a mount that volumed did not make; left alone", p)
			}
		} else {
			if err := a.refuseNonEmptyStaging(d); err != nil {
				return err
			}
			if err := a.cfg.Mounter.EnsureDir(p); err != nil {
				return err
			}
			if err := stager.Stage(ctx, d, p); err != nil {
				return err
			}
		}
		pt, err := a.cfg.Mounter.At(p)
		if err != nil {
			return err
		}
		if !pt.Root {
			return fmt.Errorf("staging %s at %s succeeded but the kernel does not show it", d.Kind, p)
		}
		rec.Staging = stagingRecord(p, pt.MountID, rec.Attachment.Device, d.Kind, nil)
		return nil
	})
}

// mountInfoAt reads the mount table for the mount at p: the slow path,
// for the rare cases statx cannot decide (who mounted what).
func (a *Agent) mountInfoAt(p string) (*mountinfo.Info, error) {
	mounts, err := a.cfg.Mounter.Mounts()
	if err != nil {
		return nil, err
	}
	return mounts.Top(p), nil
}

func stagingRecord(p string, id int, dev, fstype string, opts []string) *store.MountRecord {
	return &store.MountRecord{Path: p, Device: dev, FSType: fstype, MountID: id, Owned: true, Options: opts}
}

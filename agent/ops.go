package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// errRetryNow marks an operation that found the world different from its
// record (e.g. the staging mount vanished) and fixed the record: the next
// pass picks the right operation, no backoff is due.
var errRetryNow = errors.New("record corrected")

func (a *Agent) stagingPath(name string) string {
	return filepath.Join(a.cfg.StateDir, "staging", name)
}

func (a *Agent) attacher(driver string) (Attacher, error) {
	att := a.cfg.Attachers[driver]
	if att == nil {
		return nil, fmt.Errorf("driver %q is not available in this build", driver)
	}
	return att, nil
}

func sourceInputs(d *Desired) map[string]string {
	b, _ := json.Marshal(d.Spec.Source)
	return map[string]string{"source": string(b)}
}

func (a *Agent) opAttach(ctx context.Context, d *Desired) error {
	att, err := a.attacher(d.Driver)
	if err != nil {
		return err
	}
	return a.state.Do(d.Name, d.Driver, OpAttach, sourceInputs(d), func(rec *store.Volume) error {
		found, err := att.Find(ctx, d)
		if err != nil {
			return err
		}
		if f, ok := pick(found); ok {
			rec.Attachment = a.attachmentOf(d, f, f.Ours)
			return nil
		}
		if len(found) > 0 {
			return fmt.Errorf("the source is already attached as %s by something other than volumed; left alone", found[0].Device)
		}
		if err := a.stagingFree(d.Name); err != nil {
			return err
		}
		f, err := att.Attach(ctx, d)
		if err != nil {
			return err
		}
		rec.Attachment = a.attachmentOf(d, f, f.Ours)
		return nil
	})
}

// stagingFree refuses a new attachment while the volume's staging path
// is still mounted: that is the volume's data on a device the record lost
// (an image moved away under it), and a second device on whatever the
// path names now would be formatted and mounted beside it.
func (a *Agent) stagingFree(name string) error {
	p := a.stagingPath(name)
	if pt, err := a.cfg.Mounter.At(p); err != nil || !pt.Root {
		return nil
	}
	return fmt.Errorf("the staging path %s is still mounted%s: not attaching a second device for this volume; unmount it, or restart volumed to adopt it", p, a.describeMount(p))
}

// pick chooses, among attachments found in place, one the volume may
// use: ours first, then one that may be shared.
func pick(found []Found) (Found, bool) {
	for _, f := range found {
		if f.Ours {
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

// attachmentOf records f for d. The volume owns it (may tear it down)
// when volumed made it, or when it rides a session another volume of
// ours made: the last of them to go logs the session out.
func (a *Agent) attachmentOf(d *Desired, f Found, made bool) *store.Attachment {
	key := sessionKey(d.Driver, f.Session)
	a.mu.Lock()
	if made && key != "" {
		// Known at once, before the record is: a volume reusing the
		// session a moment later must see that it is ours.
		a.madeSessions[key] = true
	}
	ours := key != "" && a.madeSessions[key]
	a.mu.Unlock()
	owned := made || ours || a.sessionOwned(d.Name, d.Driver, f.Session)
	return &store.Attachment{
		Driver: d.Driver, Device: f.Device, Identity: f.Identity, Session: f.Session,
		Owned: owned && !f.Pinned, Pinned: f.Pinned, Source: sourceKey(d.Spec.Source),
	}
}

// sessionKey names a shared kernel object across drivers; "" for none.
func sessionKey(driver, session string) string {
	if session == "" {
		return ""
	}
	return driver + "\x00" + session
}

func (a *Agent) sessionOwned(name, driver, session string) bool {
	if session == "" {
		return false
	}
	for n, rec := range a.state.Snapshot() {
		if n != name && rec.Attachment != nil && rec.Attachment.Driver == driver && rec.Attachment.Session == session && rec.Attachment.Owned {
			return true
		}
	}
	return false
}

// sharers are the attachments other volumes hold through the same driver.
func (a *Agent) sharers(name, driver string) []store.Attachment {
	var out []store.Attachment
	for n, rec := range a.state.Snapshot() {
		if n != name && rec.Attachment != nil && rec.Attachment.Driver == driver {
			out = append(out, *rec.Attachment)
		}
	}
	return out
}

// opMountDevice probes the device, formats it only when it is blank and
// the manifest allows, and mounts it at the staging path. A filesystem
// is never made again over one that exists, except the half-made one of
// an interrupted format, proven by its UUID and its own checker.
func (a *Agent) opMountDevice(ctx context.Context, d *Desired) error {
	rec := a.state.Get(d.Name)
	if rec == nil || rec.Attachment == nil {
		return errRetryNow
	}
	if stager, ok := a.cfg.Attachers[d.Driver].(Stager); ok {
		return a.stageSource(ctx, d, stager)
	}
	if err := a.formatRefusedFor(d); err != nil {
		return err
	}
	dev := rec.Attachment.Device
	fs := d.Spec.Filesystem
	if fs == nil {
		return fmt.Errorf("no filesystem block: raw block volumes are not supported yet")
	}
	if pt, err := a.cfg.Mounter.At(a.stagingPath(d.Name)); err == nil && pt.Root {
		// Mounted already: whatever format there was had finished.
		a.clearFormatInterrupted(d.Name)
		return a.mountStaging(d, dev)
	}
	sigs, err := a.cfg.FS.Probe(ctx, dev)
	if err != nil {
		return fmt.Errorf("probe %s: %w", dev, err)
	}
	format := func(force bool) error {
		return a.run(ctx, d.Name, d.Driver, OpFormat, func(ctx context.Context) error {
			uuid := newUUID()
			inputs := map[string]string{"device": dev, "fsType": fs.Type, "uuid": uuid}
			return a.state.Do(d.Name, d.Driver, OpFormat, inputs, func(*store.Volume) error {
				return a.cfg.FS.Mkfs(ctx, dev, fs.Type, uuid, mkfsArgs(fs, force))
			})
		})
	}
	redo, err := a.resumeFormat(ctx, d, dev, sigs)
	if err != nil {
		return err
	}
	if redo {
		if err := format(true); err != nil {
			return a.formatFailed(ctx, d, dev, err)
		}
	} else {
		needFormat, err := decideFormat(sigs, fs, readOnlySource(d))
		if err != nil {
			return fmt.Errorf("%s: %w", dev, err)
		}
		if needFormat {
			if err := format(false); err != nil {
				return a.formatFailed(ctx, d, dev, err)
			}
		}
	}
	a.clearFormatInterrupted(d.Name)
	err = a.mountStaging(d, dev)
	a.noteMountResult(d, err)
	return err
}

// resumeFormat settles a format that a crash left uncertain: it reports
// whether that format must be done again, which only a half-made
// filesystem of its own, found damaged by its read-only checker, earns.
// A mount failure is never a reason: options, permissions or a path make
// mounts fail on perfect filesystems.
func (a *Agent) resumeFormat(ctx context.Context, d *Desired, dev string, sigs []Signature) (bool, error) {
	uuid, pending := a.formatInterrupted(d.Name)
	if !pending {
		return false, nil
	}
	fstype := d.Spec.Filesystem.Type
	var info FSInfo
	if onlyFilesystem(sigs, fstype) {
		var err error
		if info, err = a.cfg.FS.Inspect(ctx, dev); err != nil {
			return false, fmt.Errorf("inspect %s after an interrupted format: %w", dev, err)
		}
	}
	verdict, why := decideResume(uuid, sigs, info, fstype)
	log := a.cfg.Log.With("volume", d.Name, "device", dev)
	switch verdict {
	case resumeKeep:
		log.Info("the interrupted format had finished; the filesystem is kept", "why", why)
		return false, nil
	case resumeOrdinary:
		return false, nil
	}
	res, err := a.cfg.FS.CheckReadOnly(ctx, fstype, dev)
	switch res {
	case FSCheckDamaged:
		log.Warn("the filesystem the interrupted format was making is incomplete; formatting again", "uuid", uuid, "check", err)
		return true, nil
	case FSCheckClean:
		log.Info("the interrupted format had finished (its filesystem checks clean); kept", "uuid", uuid)
	default:
		log.Warn("cannot tell whether the interrupted format finished; the filesystem is kept", "uuid", uuid, "check", err)
	}
	return false, nil
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

func (a *Agent) mountStaging(d *Desired, dev string) error {
	fs := d.Spec.Filesystem
	return a.state.Do(d.Name, d.Driver, OpMountDevice, map[string]string{"device": dev}, func(rec *store.Volume) error {
		p := a.stagingPath(d.Name)
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
			rec.Staging.DeviceBytes = a.deviceSize(dev)
			return nil
		}
		if err := a.cfg.Mounter.EnsureDir(p); err != nil {
			return err
		}
		opts := stagingOptions(d)
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
		rec.Staging.DeviceBytes = a.deviceSize(dev)
		return nil
	})
}

// deviceSize is the device's size now, 0 when unknown (growth is then
// decided at the next check).
func (a *Agent) deviceSize(dev string) int64 {
	n, err := a.cfg.FS.DeviceSize(dev)
	if err != nil {
		return 0
	}
	return n
}

// stageSource puts a source that is not a block device (a directory, a
// tmpfs) at the staging path.
func (a *Agent) stageSource(ctx context.Context, d *Desired, stager Stager) error {
	return a.state.Do(d.Name, d.Driver, OpMountDevice, nil, func(rec *store.Volume) error {
		p := a.stagingPath(d.Name)
		if pt, err := a.cfg.Mounter.At(p); err == nil && pt.Root {
			if !stager.IsStaged(d, p) {
				return fmt.Errorf("staging path %s has a mount that volumed did not make; left alone", p)
			}
		} else {
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
			return fmt.Errorf("staging %s at %s succeeded but the kernel does not show it", d.Driver, p)
		}
		rec.Staging = stagingRecord(p, pt.MountID, rec.Attachment.Device, d.Driver, nil)
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
	return topAt(mounts, p), nil
}

// formatInterrupted returns the UUID of the format a crash left
// uncertain for the volume, if one did.
func (a *Agent) formatInterrupted(name string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	uuid, ok := a.interruptedFormats[name]
	return uuid, ok
}

func (a *Agent) clearFormatInterrupted(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.interruptedFormats, name)
}

func mkfsArgs(fs *manifest.Filesystem, force bool) []string {
	args := slices.Clone(fs.MkfsOptions)
	if force && (fs.Type == "xfs" || fs.Type == "btrfs") {
		args = append(args, "-f")
	}
	return args
}

// decideFormat says whether a device may and must be formatted. Anything
// that is not the wanted filesystem is refused: data loss is worse than a
// volume that does not come up.
func decideFormat(sigs []Signature, fs *manifest.Filesystem, readOnly bool) (bool, error) {
	var fsTypes []string
	for _, s := range sigs {
		if s.Usage != "filesystem" {
			return false, fmt.Errorf("carries a %s signature (%s, at byte %d): volumed never formats or mounts over it", s.Type, s.Usage, s.Offset)
		}
		if !slices.Contains(fsTypes, s.Type) {
			fsTypes = append(fsTypes, s.Type)
		}
	}
	switch {
	case len(fsTypes) > 1:
		return false, fmt.Errorf("carries several filesystem signatures (%s): refusing to guess", strings.Join(fsTypes, ", "))
	case len(fsTypes) == 1:
		if !compatibleFS(fsTypes[0], fs.Type) {
			return false, fmt.Errorf("holds an existing %s filesystem but the manifest wants %s: not reformatted", fsTypes[0], fs.Type)
		}
		return false, nil
	}
	if fs.Format == manifest.FormatNever {
		return false, fmt.Errorf("is blank and filesystem.format is never")
	}
	if readOnly {
		return false, fmt.Errorf("is blank and the source is read-only: cannot format")
	}
	return true, nil
}

func compatibleFS(found, want string) bool {
	if want == "ext4" {
		return found == "ext4" || found == "ext3" || found == "ext2"
	}
	return found == want
}

func readOnlySource(d *Desired) bool {
	return d.Spec.Source.Loop != nil && d.Spec.Source.Loop.ReadOnly
}

// stagingOptions are the options of the staging mount. suid and dev are
// spelled out when allowed: the list is then never empty, so a record
// of it can be told from one that predates recording (nil).
func stagingOptions(d *Desired) []string {
	fs := d.Spec.Filesystem
	opts := slices.Clone(fs.MountOptions)
	opts = append(opts, flagWord(!fs.AllowSuid, "nosuid", "suid"), flagWord(!fs.AllowDev, "nodev", "dev"))
	if readOnlySource(d) {
		opts = append(opts, "ro")
	}
	return opts
}

func flagWord(on bool, yes, no string) string {
	if on {
		return yes
	}
	return no
}

func stagingRecord(p string, id int, dev, fstype string, opts []string) *store.MountRecord {
	return &store.MountRecord{Path: p, Device: dev, FSType: fstype, MountID: id, Owned: true, Options: opts}
}

func (a *Agent) opPublish(ctx context.Context, d *Desired, t DesiredTarget) error {
	return a.state.Do(d.Name, d.Driver, OpPublish, map[string]string{"target": t.Path}, func(rec *store.Volume) error {
		if hasTarget(rec, t.Path) {
			// Planned from a snapshot taken before the publish that
			// recorded it finished: recording it twice would leave a
			// stale twin behind.
			return nil
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
		o := bindOptions(d, t)
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
		rec.Targets = append(rec.Targets, targetRecord(tp.MountID, t, bindWords(o)))
		return nil
	})
}

// refuseNonEmpty: a mount hides what its directory holds, which is
// seldom meant (a path typed wrong, data written before the volume came
// up), so the manifest must ask for it.
func (a *Agent) refuseNonEmpty(t DesiredTarget) error {
	if t.AllowNonEmpty {
		return nil
	}
	n, err := a.cfg.Mounter.Entries(t.Path)
	if err != nil {
		return fmt.Errorf("target %s: %w", t.Path, err)
	}
	if n == 0 {
		return nil
	}
	entries := "entries"
	if n == 1 {
		entries = "entry"
	}
	return fmt.Errorf("target %s is not empty: mounting would hide %d %s; set allowNonEmpty: true on the mount to allow it", t.Path, n, entries)
}

// bindOptions: nosuid and nodev unless the manifest allows them; a
// volume without a filesystem block (directory, tmpfs) gets the defaults.
func bindOptions(d *Desired, t DesiredTarget) BindOptions {
	o := BindOptions{ReadOnly: t.ReadOnly || readOnlySource(d), NoSuid: true, NoDev: true}
	if fs := d.Spec.Filesystem; fs != nil {
		o.NoSuid, o.NoDev = !fs.AllowSuid, !fs.AllowDev
		o.NoExec = slices.Contains(fs.MountOptions, "noexec")
	}
	return o
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

func (a *Agent) opUnpublish(ctx context.Context, name, driver, path string) error {
	return a.state.Do(name, driver, OpUnpublish, map[string]string{"target": path}, func(rec *store.Volume) error {
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

func (a *Agent) unmount(ctx context.Context, name, path string) error {
	unmount := func(ctx context.Context) error { return a.cfg.Mounter.Unmount(ctx, path) }
	return a.teardownStep(ctx, name, "unmount", path, busyWait, unmount)
}

func (a *Agent) opUnmountDevice(ctx context.Context, name, driver string) error {
	return a.state.Do(name, driver, OpUnmountDevice, nil, func(rec *store.Volume) error {
		if rec.Staging == nil {
			return nil
		}
		p := rec.Staging.Path
		if sp, err := a.cfg.Mounter.At(p); err == nil && sp.Root {
			if sp.MountID != rec.Staging.MountID {
				top, err := a.mountInfoAt(p)
				if err != nil {
					return err
				}
				if top == nil || !sameDevice(top, rec.Staging.Device) {
					return fmt.Errorf("something else%s is mounted on top of %s; left alone", a.describeMount(p), p)
				}
			}
			if err := a.unmount(ctx, name, p); err != nil {
				return err
			}
		}
		rec.Staging = nil
		_ = os.Remove(p) // an empty dir of our own; harmless if it stays
		return nil
	})
}

func (a *Agent) opDetach(ctx context.Context, name, driver string) error {
	return a.state.Do(name, driver, OpDetach, nil, func(rec *store.Volume) error {
		if rec.Attachment == nil {
			return nil
		}
		at := *rec.Attachment
		key := sessionKey(at.Driver, at.Session)
		// A session volumed made is released by whichever of its
		// volumes goes last, even one that found it already there.
		a.mu.Lock()
		ours := key != "" && a.madeSessions[key]
		a.mu.Unlock()
		if (at.Owned || ours) && !at.Pinned {
			att, err := a.attacher(at.Driver)
			if err != nil {
				return err
			}
			sharers := a.sharers(name, at.Driver)
			at.Owned = true
			detach := func(ctx context.Context) error { return att.Detach(ctx, at, sharers) }
			if err := a.teardownStep(ctx, name, "detach", at.Device, 0, detach); err != nil {
				return err
			}
			if key != "" && !slices.ContainsFunc(sharers, func(o store.Attachment) bool { return o.Session == at.Session }) {
				a.mu.Lock()
				delete(a.madeSessions, key)
				a.mu.Unlock()
			}
		}
		rec.Attachment = nil
		return nil
	})
}

// topAt returns the topmost mount whose mount point is exactly p.
// mountinfo lists a mount after the one it covers, so the last wins.
func topAt(mounts []*mountinfo.Info, p string) *mountinfo.Info {
	var top *mountinfo.Info
	for _, m := range mounts {
		if m.Mountpoint == p {
			top = m
		}
	}
	return top
}

func stagingInfo(mounts []*mountinfo.Info, rec *store.Volume) *mountinfo.Info {
	if rec == nil || rec.Staging == nil {
		return nil
	}
	top := topAt(mounts, rec.Staging.Path)
	if top == nil || (top.ID != rec.Staging.MountID && !sameDevice(top, rec.Staging.Device)) {
		return nil
	}
	return top
}

// sameSource: m shows the filesystem of the staging mount st, at subPath.
func sameSource(m, st *mountinfo.Info, subPath string) bool {
	if m == nil || st == nil {
		return false
	}
	return m.Major == st.Major && m.Minor == st.Minor && filepath.Clean(m.Root) == filepath.Join(st.Root, subPath)
}

// sameDevice: m is a mount of the block device dev.
func sameDevice(m *mountinfo.Info, dev string) bool {
	if dev == "" {
		return false
	}
	if m.Source == dev {
		return true
	}
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return false
	}
	return int(unix.Major(st.Rdev)) == m.Major && int(unix.Minor(st.Rdev)) == m.Minor
}

func fileSize(p string) (int64, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/drivers/iscsi"
	"github.com/volumed/volumed/drivers/loop"
	"github.com/volumed/volumed/drivers/mount"
	"github.com/volumed/volumed/drivers/nvme"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/store"
)

// loopTag marks the loop devices an agent makes (kept by the kernel), so
// they are recognised as its own even when its state file is lost. It
// names the agent by its state dir: a second agent on the host (a demo, a
// test) never takes the first one's devices for orphans.
func loopTag(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return "volumed:" + hex.EncodeToString(sum[:8])
}

// attachers are the drivers this build has, by source kind. The network
// drivers present the host's identity; what the host booted from is
// pinned.
func attachers(stateDir string, host firmware.HostIdentity, boot []firmware.BootVolume) map[string]agent.Attacher {
	return map[string]agent.Attacher{
		"loop":      loopAttacher{tag: loopTag(stateDir), idx: new(loop.Index)},
		"directory": dirAttacher{},
		"tmpfs":     tmpfsAttacher{},
		"nvme":      nvmeAttacher{c: &nvme.Client{}, host: host, boot: boot},
		"iscsi":     iscsiAttacher{c: &iscsi.Client{}, host: host, boot: boot},
		"device":    deviceAttacher{},
	}
}

// loopAttacher adapts drivers/loop to the core's Attacher.
type loopAttacher struct {
	tag string
	// idx answers the Finds of many volumes from one sysfs pass; the
	// attacher's own attaches are noted in it.
	idx *loop.Index
}

func (l loopAttacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	devs, err := l.idx.Find(d.Spec.Source.Loop.File)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]agent.Found, 0, len(devs))
	for _, dev := range devs {
		out = append(out, agent.Found{Device: dev.Path, Identity: dev.Identity(), Owned: dev.Tag == l.tag})
	}
	return out, nil
}

func (l loopAttacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	src := d.Spec.Source.Loop
	if src.Create != nil {
		if err := checkRoom(src, false); err != nil {
			return agent.Found{}, err
		}
		if _, err := loop.EnsureImage(src.File, src.Create.SizeBytes); err != nil {
			return agent.Found{}, err
		}
	} else if _, err := os.Stat(src.File); err != nil {
		return agent.Found{}, fmt.Errorf("image %s: %w (set source.loop.create.size to have it created)", src.File, err)
	}
	dev, err := loop.Attach(ctx, loop.Options{File: src.File, ReadOnly: src.ReadOnly, Tag: l.tag})
	if err != nil {
		l.idx.Invalidate() // it may have bound a device and then failed
		return agent.Found{}, err
	}
	l.idx.Note(*dev)
	return agent.Found{Device: dev.Path, Identity: dev.Identity(), Owned: true}, nil
}

// byIdentity finds the bound loop device with the given identity: the
// recorded device name is a hint, the backing file's device and inode
// decide. The path is not compared: an image moved away (or deleted)
// under its device is still that device's file, and losing track of it
// would attach a second device to whatever the path names now.
func byIdentity(a store.Attachment) (*loop.Device, error) {
	_, bdev, bino, ok := loop.ParseIdentity(a.Identity)
	if !ok {
		return nil, fmt.Errorf("recorded identity %q is not a loop device's", a.Identity)
	}
	same := func(d *loop.Device) bool { return d != nil && d.BackingDev == bdev && d.BackingIno == bino }
	if n, ok := loopNumber(a.Device); ok {
		dev, err := loop.Get(n)
		if err != nil {
			return nil, err
		}
		if same(dev) {
			return dev, nil
		}
	}
	devs, err := loop.List()
	if err != nil {
		return nil, err
	}
	for i := range devs {
		if same(&devs[i]) {
			return &devs[i], nil
		}
	}
	return nil, nil
}

// CheckBacking compares the file at the image's path (the manifest's, or
// the recorded one for a volume going away) with the file the device
// reads: one stat, no device I/O.
func (loopAttacher) CheckBacking(d *agent.Desired, a store.Attachment) (*agent.Problem, error) {
	file, bdev, bino, ok := loop.ParseIdentity(a.Identity)
	if !ok {
		return nil, fmt.Errorf("recorded identity %q is not a loop device's", a.Identity)
	}
	if d != nil && d.Spec.Source.Loop != nil {
		file = d.Spec.Source.Loop.File
	}
	fdev, fino, err := loop.FileIdentity(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &agent.Problem{Reason: "ImageDeleted", Message: fmt.Sprintf(
			"the image %s was deleted or moved away while %s still uses it (inode %d:%d): the volume's data now lives only in that file, which is freed when the device is detached (removing the manifest does that); copy the data out of the mounted volume (or from %s) and put an image back at %s; volumed attaches and formats nothing for this volume meanwhile",
			file, a.Device, bdev, bino, a.Device, file)}, nil
	case err != nil:
		return nil, err
	case fdev == bdev && fino == bino:
		return nil, nil
	}
	return &agent.Problem{Reason: "ImageReplaced", Message: fmt.Sprintf(
		"the image %s was replaced: the path names another file (inode %d:%d) than the one %s still uses (inode %d:%d); the volume stays on the old file and volumed neither attaches nor formats the new one; to switch to it, copy out what you need, remove the manifest (the old device is detached) and add it back",
		file, fdev, fino, a.Device, bdev, bino)}, nil
}

func loopNumber(dev string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(dev, "/dev/loop"))
	return n, err == nil && strings.HasPrefix(dev, "/dev/loop")
}

func (loopAttacher) Verify(_ context.Context, a store.Attachment) (string, bool, error) {
	dev, err := byIdentity(a)
	if err != nil || dev == nil {
		return "", false, err
	}
	return dev.Path, true, nil
}

// Grow extends the image to the manifest's size (never shrinks it) and
// has the loop device pick the new size up.
func (loopAttacher) Grow(ctx context.Context, d *agent.Desired, a store.Attachment) error {
	src := d.Spec.Source.Loop
	if src.Create == nil {
		return nil
	}
	dev, err := byIdentity(a)
	if err != nil {
		return err
	}
	if dev == nil {
		return fmt.Errorf("loop device of %s is gone", src.File)
	}
	if err := checkRoom(src, true); err != nil {
		return err
	}
	_, err = loop.Grow(ctx, *dev, src.Create.SizeBytes)
	return err
}

// checkRoom refuses an image size the filesystem holding the image
// cannot take, unless the manifest opts in to overcommitting it. An
// existing image is checked only when it is to grow: it is never
// resized at attach.
func checkRoom(src *manifest.LoopSource, growing bool) error {
	if src.Create.Overcommit {
		return nil
	}
	if st, err := os.Lstat(src.File); err == nil && (!growing || st.Size() >= src.Create.SizeBytes) {
		return nil
	}
	err := loop.CheckRoom(src.File, src.Create.SizeBytes)
	if errors.Is(err, loop.ErrNoRoom) {
		return fmt.Errorf("source.loop.create.size %s refused: %w; a sparse image that runs out of room corrupts the filesystem inside it: free space, lower the size, or set create.overcommit: true", src.Create.Size, err)
	}
	return err
}

// loopDetachWait bounds the wait for another opener of the device to let
// go (the driver would wait as long as ctx): a holder that stays must
// show as a failed detach naming it, not as one that never ends.
const loopDetachWait = 10 * time.Second

func (loopAttacher) Detach(ctx context.Context, a store.Attachment, _ []store.Attachment) error {
	dev, err := byIdentity(a)
	if err != nil || dev == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, loopDetachWait)
	defer cancel()
	return markBusy(loop.Detach(ctx, *dev), loop.ErrBusy)
}

func (l loopAttacher) ListOwned(context.Context) ([]store.Attachment, error) {
	devs, err := loop.List()
	if err != nil {
		return nil, err
	}
	var out []store.Attachment
	for _, d := range devs {
		if d.Tag == l.tag {
			out = append(out, store.Attachment{Driver: "loop", Device: d.Path, Identity: d.Identity(), Owned: true})
		}
	}
	return out, nil
}

// filesystems adapts drivers/blockfs.
type filesystems struct{}

func (filesystems) Probe(ctx context.Context, device string) ([]agent.Signature, error) {
	sigs, err := blockfs.ProbeDeviceWith(ctx, device, blockfs.ProbeOptions{BlkidOnlyIfBlank: true})
	if err != nil {
		return nil, err
	}
	out := make([]agent.Signature, 0, len(sigs))
	for _, s := range sigs {
		out = append(out, agent.Signature{Type: s.Type, Usage: s.Usage, Offset: s.Offset})
	}
	return out, nil
}

func (filesystems) Mkfs(ctx context.Context, device, fstype, uuid string, extra []string) error {
	return blockfs.Mkfs(ctx, device, fstype, uuid, extra)
}

func (filesystems) Inspect(ctx context.Context, device string) (agent.FSInfo, error) {
	i, err := blockfs.Inspect(ctx, device)
	return agent.FSInfo{UUID: i.UUID, EverMounted: i.EverMounted}, err
}

func (filesystems) CheckReadOnly(ctx context.Context, fstype, device string) (agent.FSCheck, error) {
	r, err := blockfs.CheckReadOnly(ctx, fstype, device)
	switch r {
	case blockfs.CheckClean:
		return agent.FSCheckClean, err
	case blockfs.CheckDamaged:
		return agent.FSCheckDamaged, err
	}
	return agent.FSCheckUnknown, err
}

func (filesystems) Grow(ctx context.Context, fstype, device, mountpoint string) error {
	return blockfs.Grow(ctx, fstype, device, mountpoint)
}

func (filesystems) DeviceSize(device string) (int64, error) { return blockfs.DeviceSize(device) }

// mounter adapts drivers/mount.
type mounter struct{}

// Mounts go onto directories opened without following any symlink, so a
// path swapped for a link between the check and the mount cannot
// redirect them.
func (mounter) MountDevice(device, target, fstype string, opts []string) error {
	err := mount.SafeMountDevice(device, target, fstype, opts)
	if errors.Is(err, mount.ErrConfig) {
		return fmt.Errorf("%w: %w", agent.ErrMountConfig, err)
	}
	return err
}

func (mounter) Bind(staging, subPath, target string, o agent.BindOptions) error {
	return mount.SafeBind(staging, subPath, target, mount.BindOptions(o))
}

func (mounter) Remount(target string, mountID int, from, opts []string) error {
	return mount.Remount(target, mountID, from, opts)
}

func (mounter) SetBindOptions(target string, mountID int, o agent.BindOptions) error {
	return mount.SetBindOptions(target, mountID, mount.BindOptions(o))
}

func (mounter) Entries(path string) (int, error) { return mount.Entries(path) }
func (mounter) EnsureDir(path string) error      { return mount.EnsureDir(path) }
func (mounter) Mounts() (agent.MountTable, error) {
	t, err := mount.ReadTable()
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (mounter) Unmount(ctx context.Context, target string) error {
	return markBusy(mount.Unmount(ctx, target), mount.ErrBusy)
}

// busyError lets the core see a driver's busy error as agent.ErrBusy
// (to name the holders) while keeping the driver's words.
type busyError struct{ error }

func (busyError) Is(target error) bool { return target == agent.ErrBusy }
func (e busyError) Unwrap() error      { return e.error }

func markBusy(err, driverBusy error) error {
	if err != nil && errors.Is(err, driverBusy) {
		return busyError{err}
	}
	return err
}

func (mounter) At(path string) (agent.MountPoint, error) {
	p, err := mount.At(path)
	return agent.MountPoint{MountID: p.MountID, Root: p.Root, Dev: p.Dev, Ino: p.Ino}, err
}

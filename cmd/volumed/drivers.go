package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/drivers/mount"
	"github.com/volumed/volumed/internal/blank"
	"github.com/volumed/volumed/kinds/kind"
)

// loopTag marks the loop devices an agent makes (kept by the kernel), so
// they are recognised as its own even when its state file is lost. It
// names the agent by its state dir: a second agent on the host (a demo, a
// test) never takes the first one's devices for orphans.
func loopTag(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return "volumed:" + hex.EncodeToString(sum[:8])
}

// attachers are the drivers this build has, by kind. The network
// drivers present the host's identity; what the host booted from is
// pinned.
func attachers(ks []kind.Kind, env kind.Env) map[string]agent.Attacher {
	out := make(map[string]agent.Attacher, len(ks))
	for _, k := range ks {
		out[k.Name()] = k.Attacher(env)
	}
	return out
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

func (filesystems) Examine(ctx context.Context, device string, created bool) (blank.Facts, error) {
	return blockfs.Examine(ctx, device, blockfs.ExamineOptions{Created: created})
}

func (filesystems) Mkfs(ctx context.Context, device, fstype, uuid string, extra []string) error {
	return blockfs.Mkfs(ctx, device, fstype, uuid, extra)
}

func (filesystems) Inspect(ctx context.Context, device string) (agent.FSInfo, error) {
	i, err := blockfs.Inspect(ctx, device)
	return agent.FSInfo{UUID: i.UUID, EverMounted: i.EverMounted, Bytes: i.Bytes}, err
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

func (mounter) BindDevice(device, target string, o agent.BindOptions) error {
	return mount.SafeBindDevice(device, target, mount.BindOptions(o))
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
	return kind.MarkBusy(mount.Unmount(ctx, target), mount.ErrBusy)
}

func (mounter) At(path string) (agent.MountPoint, error) {
	p, err := mount.At(path)
	return agent.MountPoint{MountID: p.MountID, Root: p.Root, Dev: p.Dev, Ino: p.Ino}, err
}

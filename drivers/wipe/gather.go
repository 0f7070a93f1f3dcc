package wipe

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/drivers/device"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/internal/inuse"
	"github.com/volumed/volumed/internal/sysfs"
)

// Options are where Gather looks.
type Options struct {
	SysRoot string // "" is /sys
	DevRoot string // "" is /dev
	// Boot are the firmware's boot volumes (firmware.BootVolumes).
	Boot []firmware.BootVolume
}

func (o Options) sys() string { return sysfs.RootOr(o.SysRoot) }
func (o Options) dev() string { return orDefault(o.DevRoot, "/dev") }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Gather finds out what Refuse and Plan need of the block device at
// path (a symlink such as /dev/disk/by-id/... is followed). Volumes is
// left for the caller, who knows the state.
func Gather(ctx context.Context, path string, o Options) (Target, error) {
	dev, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Target{}, err
	}
	dir, err := sysfs.BlockDir(o.SysRoot, dev)
	if err != nil {
		return Target{}, err
	}
	t := Target{Device: dev}
	if t.Use, err = inuse.CheckAt(dir, dev); err != nil {
		return t, err
	}
	if t.Size, err = sysfs.Size(dir); err != nil {
		return t, fmt.Errorf("%s: size: %w", dev, err)
	}
	parts, err := device.Partitions(dir)
	if err != nil {
		return t, err
	}
	for _, p := range parts {
		t.Partitions = append(t.Partitions, filepath.Join(o.dev(), p.Node))
	}
	t.Discard = discards(dir)
	t.Pinned = pinned(o, dir, o.Boot)
	sigs, err := blockfs.ProbeDevice(ctx, dev)
	if err != nil {
		return t, err
	}
	t.Signatures = describe(sigs)
	return t, nil
}

// describe says each signature found once: blkid, which gives no offset,
// often finds what volumed's probe found at its offset.
func describe(sigs []blockfs.Signature) []string {
	var out []string
	for _, s := range sigs {
		desc := fmt.Sprintf("%s at byte %d", s.Type, s.Offset)
		if s.Offset < 0 {
			if slices.ContainsFunc(sigs, func(o blockfs.Signature) bool { return o.Type == s.Type && o.Offset >= 0 }) {
				continue
			}
			desc = s.Type + " (where, blkid does not say)"
		}
		if !slices.Contains(out, desc) {
			out = append(out, desc)
		}
	}
	return out
}

// discards: the device (or, for a partition, its disk) takes discards.
func discards(dir string) bool {
	for _, q := range []string{filepath.Join(dir, "queue"), filepath.Join(dir, "..", "queue")} {
		if n, err := strconv.ParseInt(sysfs.AttrOr(q, "discard_max_bytes"), 10, 64); err == nil {
			return n > 0
		}
	}
	return false
}

var sessionInPath = regexp.MustCompile(`/session(\d+)/`)

// pinned names the boot volume the device is, by the iSCSI target of
// its session or the NVMe subsystem of its controller.
func pinned(o Options, dir string, boot []firmware.BootVolume) string {
	if len(boot) == 0 {
		return ""
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = dir
	}
	if m := sessionInPath.FindStringSubmatch(real); m != nil {
		iqn := sysfs.AttrOr(filepath.Join(o.sys(), "class", "iscsi_session", "session"+m[1]), "targetname")
		if firmware.PinnedISCSI(boot, iqn) {
			return "iSCSI target " + iqn
		}
	}
	if nqn := sysfs.AttrOr(dir, "device", "subsysnqn"); firmware.PinnedNVMe(boot, nqn) {
		return "NVMe subsystem " + nqn
	}
	return ""
}

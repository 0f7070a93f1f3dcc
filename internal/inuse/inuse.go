// Package inuse is volumed's one answer to "is this block device in
// use outside volumed?": what the kernel says holds it or one of its
// partitions (sysfs holders/: device-mapper, md, bcache), then an
// exclusive open (O_EXCL fails while the device or a partition is
// mounted in any mount namespace, claimed by a holder, or opened
// exclusively by a tool such as mkfs), and the mount table read only
// when that open is refused, to say where it is mounted (reading every
// mount on the host per check would make n checks cost n²).
package inuse

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/sysfs"
)

// Use is what the check found of one device.
type Use struct {
	Device string
	// Holders are the kernel names that hold the device or one of its
	// partitions, as "holder (of part)".
	Holders []string
	// Claimed: an exclusive open was refused (EBUSY).
	Claimed bool
	// Mounts are the mount points, in this mount namespace, of the
	// device or a partition; read only when Claimed.
	Mounts []string
	// Gone: the device does not exist (any more).
	Gone bool
}

// Busy is the rule: a device is in use when anything holds it, or an
// exclusive open of it is refused. A mount in another namespace shows
// only as the refused open, which is why the open is asked at all.
func Busy(u Use) (bool, string) {
	switch {
	case len(u.Holders) > 0:
		return true, fmt.Sprintf("%s is held by %s", u.Device, strings.Join(u.Holders, ", "))
	case u.Claimed && len(u.Mounts) > 0:
		return true, fmt.Sprintf("%s is mounted at %s", u.Device, strings.Join(u.Mounts, ", "))
	case u.Claimed:
		return true, fmt.Sprintf("%s is mounted (in another mount namespace) or open exclusively by another process", u.Device)
	}
	return false, ""
}

// Claim checks dev and, when nothing uses it, returns it opened
// exclusively (read-only, O_EXCL): nobody can mount it or claim it
// until the caller closes the file. f is nil whenever the device is in
// use or gone. sysRoot is where sysfs is ("" is /sys).
func Claim(sysRoot, dev string) (f *os.File, u Use, err error) {
	dir, err := sysfs.BlockDir(sysRoot, dev)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Use{Device: dev, Gone: true}, nil
	}
	if err != nil {
		return nil, Use{Device: dev}, err
	}
	return ClaimAt(dir, dev)
}

// ClaimAt is Claim for a caller that knows the device's sysfs directory
// (a driver listing its own devices).
func ClaimAt(dir, dev string) (f *os.File, u Use, err error) {
	u = Use{Device: dev}
	nums, holders, err := related(dir)
	if errors.Is(err, fs.ErrNotExist) {
		u.Gone = true
		return nil, u, nil
	}
	if err != nil {
		return nil, u, fmt.Errorf("in-use check of %s: %w", dev, err)
	}
	if u.Holders = holders; len(holders) > 0 {
		return nil, u, nil
	}
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), dev), u, nil
	case errors.Is(err, unix.EBUSY):
		u.Claimed = true
		u.Mounts, err = mountsOf(nums)
		return nil, u, err
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
		u.Gone = true
		return nil, u, nil
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		// Not allowed to ask (a device cgroup, an LSM): a mount here
		// still proves use; no mount proves nothing.
		if u.Mounts, _ = mountsOf(nums); len(u.Mounts) > 0 {
			u.Claimed = true
			return nil, u, nil
		}
	}
	return nil, u, &os.PathError{Op: "open", Path: dev, Err: err}
}

// Check is Claim without keeping the claim.
func Check(sysRoot, dev string) (Use, error) {
	return release(Claim(sysRoot, dev))
}

// CheckAt is ClaimAt without keeping the claim.
func CheckAt(dir, dev string) (Use, error) {
	return release(ClaimAt(dir, dev))
}

func release(f *os.File, u Use, err error) (Use, error) {
	if f != nil {
		f.Close()
	}
	return u, err
}

// related reads the device numbers of the device and its partitions,
// and what holds any of them.
func related(dir string) (map[uint64]bool, []string, error) {
	parts, err := sysfs.Partitions(dir)
	if err != nil {
		return nil, nil, err
	}
	nodes := []string{dir}
	for _, p := range parts {
		nodes = append(nodes, filepath.Join(dir, p))
	}
	nums := map[uint64]bool{}
	var holders []string
	for i, n := range nodes {
		hs, err := sysfs.Holders(n)
		if err != nil {
			return nil, nil, err
		}
		for _, h := range hs {
			of := ""
			if i > 0 {
				of = filepath.Base(n)
			}
			holders = append(holders, Describe(filepath.Join(n, "holders", h), of))
		}
		if major, minor, err := sysfs.DevNumber(n); err == nil {
			nums[unix.Mkdev(major, minor)] = true
		}
	}
	sort.Strings(holders)
	return nums, holders, nil
}

// Holder names a holder as an operator knows it: the kernel name, and
// for a device-mapper device its dm name and what made it, judged by
// the prefix of its dm uuid ("LVM-", "CRYPT-LUKS2-", "mpath-"), since
// "dm-3" alone says nothing of whether to run vgchange, cryptsetup close
// or dmsetup remove. part is the partition it holds ("" for the device).
func Holder(kernel string, dm DM, part string) string {
	var about []string
	if dm.Name != "" {
		about = append(about, strings.TrimSpace(dmKind(dm.UUID)+" "+dm.Name))
	}
	if part != "" {
		about = append(about, "of "+part)
	}
	if len(about) == 0 {
		return kernel
	}
	return kernel + " (" + strings.Join(about, ", ") + ")"
}

// DM is what sysfs says of a device-mapper device (its dm/ directory);
// zero for any other holder (md, bcache).
type DM struct{ Name, UUID string }

func dmKind(uuid string) string {
	for _, k := range []struct{ prefix, kind string }{
		{"LVM-", "LVM"}, {"CRYPT-LUKS", "LUKS"}, {"CRYPT-", "dm-crypt"}, {"mpath-", "multipath"}, {"part", "partition"},
	} {
		if strings.HasPrefix(uuid, k.prefix) {
			return k.kind
		}
	}
	return "dm"
}

// Describe is Holder of the holder whose sysfs link (a device's
// holders/NAME) is link.
func Describe(link, part string) string {
	return Holder(filepath.Base(link), dmName(link), part)
}

// dmName reads the dm/ directory of a holder (a link to its sysfs dir).
func dmName(holder string) DM {
	return DM{Name: sysfs.AttrOr(holder, "dm", "name"), UUID: sysfs.AttrOr(holder, "dm", "uuid")}
}

// mountsOf lists where, in this mount namespace, any of the devices is
// mounted.
func mountsOf(nums map[uint64]bool) ([]string, error) {
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !nums[unix.Mkdev(uint32(m.Major), uint32(m.Minor))], false
	})
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	sort.Strings(out)
	return out, nil
}

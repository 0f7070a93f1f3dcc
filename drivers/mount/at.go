package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/safepath"
)

// ErrNoMountAPI is wrapped when the kernel lacks the mount API that
// MountDeviceAt and BindAt use (fsopen, open_tree, move_mount:
// Linux 5.2; mount_setattr: Linux 5.12).
var ErrNoMountAPI = errors.New("the kernel lacks the new mount API (Linux 5.12 or later is needed)")

// ErrConfig marks a mount refused for how it was asked (an option the
// filesystem does not know or accept), before any of the filesystem on
// the device was read: it is never evidence of damage.
var ErrConfig = errors.New("mount option refused")

// SafeMountDevice mounts the block device at the directory target,
// creating missing directories, with no symlink followed anywhere in
// target: see safepath.OpenDir and MountDeviceAt.
func SafeMountDevice(device, target, fstype string, opts []string) error {
	t, err := safepath.OpenDir(target, true)
	if err != nil {
		return fmt.Errorf("mount %s: target: %w", device, err)
	}
	defer t.Close()
	return MountDeviceAt(device, t, fstype, opts)
}

// SafeBind bind-mounts the directory subPath inside source (the whole of
// source when subPath is empty) at the directory target, creating missing
// directories of target. No symlink is followed in source, subPath or
// target, and subPath cannot leave source: see safepath and BindAt. A
// missing subPath is an error, not created: the volume's content is the
// user's.
func SafeBind(source, subPath, target string, o BindOptions) error {
	src, err := safepath.OpenDir(source, false)
	if err != nil {
		return fmt.Errorf("bind: source: %w", err)
	}
	defer src.Close()
	if subPath != "" {
		sub, err := safepath.OpenBeneath(src, subPath, false)
		if err != nil {
			return fmt.Errorf("bind: subPath: %w", err)
		}
		defer sub.Close()
		src = sub
	}
	t, err := safepath.OpenDir(target, true)
	if err != nil {
		return fmt.Errorf("bind %s: target: %w", src.Name(), err)
	}
	defer t.Close()
	return BindAt(src, t, o)
}

// MountDeviceAt mounts the block device on the directory open as target
// (an O_PATH descriptor will do) as fstype with fstab-style options. The
// filesystem is configured with fsopen/fsconfig, each filesystem option
// on its own so that the kernel's complaint names it, and attached with
// move_mount to the descriptor: whatever the target's path names by now
// does not matter.
func MountDeviceAt(device string, target *os.File, fstype string, opts []string) error {
	o := ParseOptions(opts)
	attrs, sbFlags, err := splitFlags(o.Flags)
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w: %w", device, target.Name(), ErrConfig, err)
	}
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	switch {
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("mount %s on %s: %w", device, target.Name(), ErrNoMountAPI)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("mount %s on %s: filesystem type %q unknown to the kernel: %w", device, target.Name(), fstype, err)
	case err != nil:
		return fmt.Errorf("mount %s on %s: fsopen %s: %w", device, target.Name(), fstype, err)
	}
	defer unix.Close(fsfd)
	fail := func(what string, err error) error {
		if msg := fsLog(fsfd); msg != "" {
			return fmt.Errorf("mount %s on %s (%s): %s: %w (kernel: %s)", device, target.Name(), fstype, what, err, msg)
		}
		return fmt.Errorf("mount %s on %s (%s): %s: %w", device, target.Name(), fstype, what, err)
	}
	// An option the filesystem refuses is refused before the superblock is
	// read: it says nothing about the filesystem on the device.
	failOption := func(opt string, err error) error {
		return fail(fmt.Sprintf("option %q", opt), fmt.Errorf("%w: %w", ErrConfig, err))
	}

	if err := unix.FsconfigSetString(fsfd, "source", device); err != nil {
		return fail("source", err)
	}
	for _, f := range sbFlags {
		if err := unix.FsconfigSetFlag(fsfd, f); err != nil {
			return failOption(f, err)
		}
	}
	if o.Data != "" {
		for _, opt := range splitOptions(o.Data) {
			key, val, hasVal := strings.Cut(opt, "=")
			if hasVal {
				err = unix.FsconfigSetString(fsfd, key, unquote(val))
			} else {
				err = unix.FsconfigSetFlag(fsfd, key)
			}
			if err != nil {
				return failOption(opt, err)
			}
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		if errors.Is(err, unix.EINVAL) {
			// Often with nothing in the log, only in dmesg.
			return fail("wrong filesystem type, bad option value or damaged filesystem", err)
		}
		return fail("create", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return fail("fsmount", err)
	}
	defer unix.Close(mfd)
	if err := moveTo(mfd, target); err != nil {
		return fmt.Errorf("mount %s on %s: %w", device, target.Name(), err)
	}
	if o.Propagation == 0 {
		return nil
	}
	flags := uint(unix.AT_EMPTY_PATH)
	if o.Propagation&unix.MS_REC != 0 {
		flags |= unix.AT_RECURSIVE
	}
	err = unix.MountSetattr(mfd, "", flags, &unix.MountAttr{Propagation: uint64(o.Propagation &^ unix.MS_REC)})
	if err == nil {
		return nil
	}
	if uerr := detach(mfd); uerr != nil {
		return fmt.Errorf("mount %s on %s: set propagation: %w (and undoing the mount: %v)", device, target.Name(), err, uerr)
	}
	return fmt.Errorf("mount %s on %s: set propagation: %w", device, target.Name(), err)
}

// BindOptions are the per-mount flags of a bind mount.
type BindOptions struct {
	ReadOnly, NoSuid, NoDev, NoExec bool
}

// BindAt bind-mounts the directory open as source at the directory open
// as target (O_PATH descriptors will do). The bind is made detached
// (open_tree), given its per-mount flags there (mount_setattr) and only
// then attached (move_mount): a read-only bind is never writable, not
// even for an instant. Flags the source mount has (a nosuid staging
// mount) are kept.
func BindAt(source, target *os.File, o BindOptions) error {
	mfd, err := unix.OpenTree(int(source.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOSYS) {
		err = ErrNoMountAPI
	}
	if err != nil {
		return fmt.Errorf("bind %s on %s: open_tree: %w", source.Name(), target.Name(), err)
	}
	defer unix.Close(mfd)
	if set, _ := o.attrs(); set != 0 {
		err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: set})
		if errors.Is(err, unix.ENOSYS) {
			err = ErrNoMountAPI
		}
		if err != nil {
			return fmt.Errorf("bind %s on %s: mount_setattr: %w", source.Name(), target.Name(), err)
		}
	}
	if err := moveTo(mfd, target); err != nil {
		return fmt.Errorf("bind %s on %s: %w", source.Name(), target.Name(), err)
	}
	return nil
}

// attrs are the mount_setattr bits o sets and the ones it clears.
func (o BindOptions) attrs() (set, clr uint64) {
	for _, f := range []struct {
		on   bool
		attr uint64
	}{
		{o.ReadOnly, unix.MOUNT_ATTR_RDONLY},
		{o.NoSuid, unix.MOUNT_ATTR_NOSUID},
		{o.NoDev, unix.MOUNT_ATTR_NODEV},
		{o.NoExec, unix.MOUNT_ATTR_NOEXEC},
	} {
		if f.on {
			set |= f.attr
		} else {
			clr |= f.attr
		}
	}
	return set, clr
}

// moveTo attaches the detached mount mfd on top of whatever is mounted
// at the directory open as target.
func moveTo(mfd int, target *os.File) error {
	err := unix.MoveMount(mfd, "", int(target.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	if errors.Is(err, unix.ENOSYS) {
		err = ErrNoMountAPI
	}
	if err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// detach unmounts exactly the mount open as mfd: its /proc/self/fd link
// leads to that mount's root, not to what is stacked on it.
func detach(mfd int) error {
	return unix.Unmount(fmt.Sprintf("/proc/self/fd/%d", mfd), unix.MNT_DETACH)
}

// splitFlags sorts MS_* flags into the per-mount attributes fsmount takes
// and the superblock flags fsconfig takes by name. MS_RDONLY is both, as
// with mount(2).
func splitFlags(ms uintptr) (attrs int, sb []string, err error) {
	for _, f := range []struct {
		ms   uintptr
		attr int
		sb   string
	}{
		{unix.MS_RDONLY, unix.MOUNT_ATTR_RDONLY, "ro"},
		{unix.MS_NOSUID, unix.MOUNT_ATTR_NOSUID, ""},
		{unix.MS_NODEV, unix.MOUNT_ATTR_NODEV, ""},
		{unix.MS_NOEXEC, unix.MOUNT_ATTR_NOEXEC, ""},
		{unix.MS_NODIRATIME, unix.MOUNT_ATTR_NODIRATIME, ""},
		{unix.MS_SYNCHRONOUS, 0, "sync"},
		{unix.MS_DIRSYNC, 0, "dirsync"},
		{unix.MS_LAZYTIME, 0, "lazytime"},
		{unix.MS_MANDLOCK, 0, "mand"},
		{unix.MS_SILENT, 0, "silent"},
	} {
		if ms&f.ms != 0 {
			attrs |= f.attr
			if f.sb != "" {
				sb = append(sb, f.sb)
			}
		}
	}
	// The atime modes exclude each other in fsmount; mount(2) lets
	// strictatime win over noatime over relatime (the default).
	switch {
	case ms&unix.MS_STRICTATIME != 0:
		attrs |= unix.MOUNT_ATTR_STRICTATIME
	case ms&unix.MS_NOATIME != 0:
		attrs |= unix.MOUNT_ATTR_NOATIME
	}
	if ms&(unix.MS_BIND|unix.MS_REC|unix.MS_REMOUNT) != 0 {
		return 0, nil, errors.New("bind, rbind and remount are not options of a device mount")
	}
	return attrs, sb, nil
}

// fsLog drains the messages the kernel queued on a filesystem context:
// "e ext4: Unrecognized mount option ..." is more use than EINVAL.
func fsLog(fsfd int) string {
	var msgs []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fsfd, buf)
		if err != nil || n <= 0 {
			return strings.Join(msgs, "; ")
		}
		msg := strings.TrimSpace(string(buf[:n]))
		if len(msg) > 2 && msg[1] == ' ' {
			msg = msg[2:] // the "e "/"w "/"i " severity prefix
		}
		msgs = append(msgs, msg)
	}
}

// unquote strips the double quotes around a whole value (SELinux
// contexts): mount(8) passes them in the data string, fsconfig takes the
// bare value.
func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// SafeBindDevice bind-mounts the block device node device at target, a
// file created (mode 0600, with missing parent directories) when absent:
// a raw block volume published where a consumer opens it. No symlink is
// followed in target; device may be a symlink (/dev/disk/by-id) but must
// resolve to a block device.
func SafeBindDevice(device, target string, o BindOptions) error {
	src, err := os.OpenFile(device, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bind %s: %w", device, err)
	}
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return fmt.Errorf("bind %s: %w", device, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fmt.Errorf("bind %s: not a block device", device)
	}
	dir, name := filepath.Split(filepath.Clean(target))
	if name == "" {
		return fmt.Errorf("bind %s on %s: not a file path", device, target)
	}
	d, err := safepath.OpenDir(dir, true)
	if err != nil {
		return fmt.Errorf("bind %s: target: %w", device, err)
	}
	defer d.Close()
	// O_NOFOLLOW with O_CREAT: a symlink planted at the target fails
	// (ELOOP) instead of creating or opening what it names.
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_CREAT|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return fmt.Errorf("bind %s: target %s: %w", device, target, err)
	}
	t := os.NewFile(uintptr(fd), target)
	defer t.Close()
	var tst unix.Stat_t
	if err := unix.Fstat(fd, &tst); err != nil {
		return fmt.Errorf("bind %s: target %s: %w", device, target, err)
	}
	if tst.Mode&unix.S_IFMT != unix.S_IFREG && tst.Rdev != st.Rdev {
		return fmt.Errorf("bind %s: target %s is not a regular file", device, target)
	}
	return BindAt(src, t, o)
}

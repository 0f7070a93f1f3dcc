package mount

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/safepath"
)

// ErrNotThatMount is wrapped when the mount at a path is not the one the
// caller meant (another mount was stacked there, or it is gone).
var ErrNotThatMount = errors.New("not the mount expected")

// Remount changes the options of the filesystem mounted at target (the
// mount with ID mountID, as mountinfo numbers it) from the options it was
// mounted with (nil if unknown) to opts, fstab-style, in place: mount(2)
// with MS_REMOUNT, so that the filesystem decides what it can change
// live. A refusal (EINVAL for most filesystems) is returned wrapped. A
// filesystem-specific option that opts drops is refused with EOPNOTSUPP
// before anything is done: filesystems keep such an option through a
// remount that does not name it, so the change would only seem made. No
// symlink in target is followed and a mount stacked on top is not
// touched.
func Remount(target string, mountID int, from, opts []string) error {
	if dropped := droppedData(from, opts); len(dropped) > 0 {
		return fmt.Errorf("remount %s: %s cannot be dropped from a mounted filesystem, which keeps it until the next mount: %w",
			target, strings.Join(dropped, ","), unix.EOPNOTSUPP)
	}
	t, err := openMountRoot(target, mountID)
	if err != nil {
		return fmt.Errorf("remount %s: %w", target, err)
	}
	defer t.Close()
	o := ParseOptions(opts)
	flags := o.Flags &^ (unix.MS_BIND | unix.MS_REC | unix.MS_REMOUNT)
	if flags&(unix.MS_NOATIME|unix.MS_RELATIME|unix.MS_STRICTATIME) == 0 {
		// A remount that names no atime mode keeps the old one; a
		// manifest that dropped noatime wants the default back.
		flags |= unix.MS_RELATIME
	}
	// The magic link leads to the mount root opened above, whatever the
	// path names by now.
	if err := unix.Mount("", fdPath(t), "", unix.MS_REMOUNT|flags, o.Data); err != nil {
		return fmt.Errorf("remount %s with %v: %w", target, opts, err)
	}
	return nil
}

// droppedData lists the filesystem-specific options in from that to no
// longer has.
func droppedData(from, to []string) []string {
	now := splitOptions(ParseOptions(to).Data)
	var out []string
	for _, o := range splitOptions(ParseOptions(from).Data) {
		if o != "" && !slices.Contains(now, o) {
			out = append(out, o)
		}
	}
	return out
}

// SetBindOptions gives the mount at target (ID mountID) exactly the
// per-mount flags in o, setting and clearing them with mount_setattr:
// the filesystem and the other mounts of it are not touched.
func SetBindOptions(target string, mountID int, o BindOptions) error {
	t, err := openMountRoot(target, mountID)
	if err != nil {
		return fmt.Errorf("set mount flags of %s: %w", target, err)
	}
	defer t.Close()
	var attr unix.MountAttr
	attr.Attr_set, attr.Attr_clr = o.attrs()
	err = unix.MountSetattr(int(t.Fd()), "", unix.AT_EMPTY_PATH, &attr)
	if errors.Is(err, unix.ENOSYS) {
		err = ErrNoMountAPI
	}
	if err != nil {
		return fmt.Errorf("set mount flags of %s: mount_setattr: %w", target, err)
	}
	return nil
}

// openMountRoot opens target with no symlink followed and checks that it
// is the root of the mount mountID, so that a change meant for our mount
// never lands on another one. The target may be a file: a raw block
// target is a device node bound onto one.
func openMountRoot(target string, mountID int) (*os.File, error) {
	t, err := safepath.OpenFile(target, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	var st unix.Statx_t
	err = unix.Statx(int(t.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_MNT_ID, &st)
	if err == nil && (st.Mask&unix.STATX_MNT_ID == 0 || st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0) {
		err = ErrNoMountID
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("statx: %w", err)
	}
	if st.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 || int(st.Mnt_id) != mountID {
		t.Close()
		return nil, fmt.Errorf("%w: mount %d is not at the top there (found %d)", ErrNotThatMount, mountID, st.Mnt_id)
	}
	return t, nil
}

func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// Entries counts what the directory at p holds (no symlink in p is
// followed): what a mount on it would hide. A missing directory holds
// nothing.
func Entries(p string) (int, error) {
	d, err := safepath.OpenDir(p, false)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count entries of %s: %w", p, err)
	}
	defer d.Close()
	// An O_PATH descriptor cannot be read; reopen the very directory.
	f, err := os.Open(fdPath(d))
	if err != nil {
		return 0, fmt.Errorf("count entries of %s: %w", p, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("count entries of %s: %w", p, err)
	}
	return len(names), nil
}

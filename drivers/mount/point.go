package mount

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Point is what statx(2) says about where a path lands: which mount (by
// the same ID mountinfo uses), whether the path is that mount's root,
// and the file's identity. It costs one syscall, where a mountinfo read
// costs a walk of every mount on the host — the difference matters with
// hundreds of volumes.
type Point struct {
	MountID int
	Root    bool // the path is the root of a mount (something is mounted here)
	Dev     uint64
	Ino     uint64
}

// ErrNoMountID means the kernel does not report mount IDs through statx
// (Linux < 5.8); callers fall back to mountinfo.
var ErrNoMountID = errors.New("statx does not report mount IDs on this kernel")

// At describes path without following a symlink in its last component.
func At(path string) (Point, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT,
		unix.STATX_INO|unix.STATX_MNT_ID, &st); err != nil {
		return Point{}, &pathError{op: "statx", path: path, err: err}
	}
	if st.Mask&unix.STATX_MNT_ID == 0 || st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return Point{}, fmt.Errorf("statx %s: %w", path, ErrNoMountID)
	}
	return Point{
		MountID: int(st.Mnt_id),
		Root:    st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0,
		Dev:     unix.Mkdev(st.Dev_major, st.Dev_minor),
		Ino:     st.Ino,
	}, nil
}

// SameFile reports whether two points are the same file (a bind mount's
// root and the directory it was bound from are).
func (p Point) SameFile(q Point) bool { return p.Dev == q.Dev && p.Ino == q.Ino }

type pathError struct {
	op, path string
	err      error
}

func (e *pathError) Error() string { return e.op + " " + e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

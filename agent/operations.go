// What the operations share: where a volume is staged, its attacher, and
// how a mount or a device is recognised in the kernel's tables.

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/store"
)

// errRetryNow marks an operation that found the world different from its
// record (e.g. the staging mount vanished) and fixed the record: the next
// pass picks the right operation, no backoff is due.
var errRetryNow = errors.New("record corrected")

func (a *Agent) stagingPath(name string) string {
	return filepath.Join(a.cfg.StateDir, "staging", name)
}

// stagingPathOf is where the volume is staged: the path its desired
// entry names (the kubelet's, for a CSI volume), else the one its record
// names (a volume no longer wanted), else <state-dir>/staging/<name>.
func (a *Agent) stagingPathOf(name string, d *Desired, rec *store.Volume) string {
	switch {
	case d != nil && d.StagingPath != "":
		return d.StagingPath
	case d == nil && rec != nil && rec.Staging != nil:
		return rec.Staging.Path
	}
	return a.stagingPath(name)
}

func (a *Agent) attacher(kind string) (Attacher, error) {
	att := a.cfg.Attachers[kind]
	if att == nil {
		return nil, fmt.Errorf("source kind %q is not available in this build", kind)
	}
	return att, nil
}

// stagingInfo is the recorded staging mount as the table shows it, nil
// when it is gone.
func stagingInfo(mounts MountTable, rec *store.Volume) *mountinfo.Info {
	if rec == nil || rec.Staging == nil {
		return nil
	}
	top := mounts.Top(rec.Staging.Path)
	if top == nil || (top.ID != rec.Staging.MountID && !sameDevice(top, rec.Staging.Device)) {
		return nil
	}
	return top
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

// boundDevice: the file at p is the block device dev (a raw block
// target binds the device node).
func boundDevice(p, dev string) bool {
	var pst, dst unix.Stat_t
	if unix.Stat(p, &pst) != nil || unix.Stat(dev, &dst) != nil {
		return false
	}
	return pst.Mode&unix.S_IFMT == unix.S_IFBLK && dst.Mode&unix.S_IFMT == unix.S_IFBLK && pst.Rdev == dst.Rdev
}

func fileSize(p string) (int64, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

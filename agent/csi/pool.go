package csi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/internal/durable"
)

// BackendLoop is the StorageClass parameter `backend: loop`: an image
// file per volume under the pool directory (run --csi-loop-pool).
const BackendLoop = "loop"

// loopPool is the directory the loop backend keeps its images in. It is
// the host's choice (a flag), not a StorageClass's: a cluster-wide class
// cannot know each host's disks, and a class author is not the host's
// owner.
type loopPool struct {
	dir string
	// reserve is kept free on the pool's filesystem.
	reserve int64
}

func (p loopPool) image(key string) string { return filepath.Join(p.dir, key+".img") }

// capacity is what the pool may still promise, given the volumes it
// promised already (decide.PoolCapacity).
//
// A reflinked file (a snapshot, a volume restored from one) counts its
// shared blocks as its own, though they take no space of their own until
// one side is written: its whole size stays promised, which may hold back
// more than it will take, never less.
func (p loopPool) capacity(vols map[string]*Provisioned, snaps map[string]*Snapshot) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p.dir, &st); err != nil {
		return 0, fmt.Errorf("loop pool %s: %w", p.dir, err)
	}
	promised := make([]decide.Promise, 0, len(vols)+len(snaps))
	for _, v := range vols {
		if v.Class != nil {
			continue // an LV: the lvm backend's pools
		}
		var n int64
		if v.Request.Source == "" {
			var err error
			if n, err = allocated(v.Image); err != nil {
				return 0, err
			}
		}
		promised = append(promised, decide.Promise{Size: v.SizeBytes, Allocated: n})
	}
	for _, sn := range snaps {
		if sn.backend() != BackendLoop {
			continue
		}
		promised = append(promised, decide.Promise{Size: sn.SizeBytes})
	}
	return decide.PoolCapacity(int64(st.Bavail)*st.Bsize, p.reserve, promised), nil
}

// allocated is the bytes the image file holds on its filesystem (0 when
// it is not made yet).
func allocated(file string) (int64, error) {
	var st unix.Stat_t
	err := unix.Stat(file, &st)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("image %s: %w", file, err)
	}
	return st.Blocks * 512, nil
}

// exists says whether a file is at the image's path.
func exists(file string) (bool, error) {
	_, err := os.Lstat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// removeImage unlinks the image durably; one already gone is fine (a
// DeleteVolume retried after a crash).
func removeImage(file string) error {
	if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove image: %w", err)
	}
	return durable.SyncDir(filepath.Dir(file))
}

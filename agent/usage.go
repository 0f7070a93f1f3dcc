package agent

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Usage is a statfs of a volume's staging mount.
type Usage struct {
	CapacityBytes, AvailableBytes, UsedBytes int64
	Inodes, InodesFree, InodesUsed           int64
}

// usageCache holds the latest statfs of every mounted volume. statfs on a
// hung filesystem blocks in the kernel, so each runs in its own goroutine
// and a volume whose previous statfs has not returned is skipped: neither
// a scrape nor `status` ever waits on a mount.
type usageCache struct {
	stat func(path string) (Usage, error)

	mu       sync.Mutex
	byVolume map[string]Usage
	inFlight map[string]bool
}

func newUsageCache() *usageCache {
	return &usageCache{stat: statfs, byVolume: map[string]Usage{}, inFlight: map[string]bool{}}
}

func (c *usageCache) get(name string) (Usage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.byVolume[name]
	return u, ok
}

// refresh starts a statfs for every volume in paths (name -> staging
// path) not already being measured, and forgets volumes not listed.
// A statfs stuck in a hung filesystem cannot be interrupted; its goroutine
// is abandoned at exit, and no second one is started for that volume.
func (c *usageCache) refresh(paths map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.byVolume {
		if _, ok := paths[name]; !ok {
			delete(c.byVolume, name)
		}
	}
	for name, p := range paths {
		c.start(name, p)
	}
}

// refreshSome is refresh of the volumes named alone: those of them in
// paths are measured again, the others forgotten; every other volume
// keeps its figure. A settle after a change of one volume costs one
// statfs, not one per volume (docs/performance.md).
func (c *usageCache) refreshSome(names []string, paths map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		if p, ok := paths[name]; ok {
			c.start(name, p)
		} else {
			delete(c.byVolume, name)
		}
	}
}

// start measures one volume unless its last statfs is still running;
// c.mu is held.
func (c *usageCache) start(name, p string) {
	if c.inFlight[name] {
		return
	}
	c.inFlight[name] = true
	go func() {
		u, err := c.stat(p)
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.inFlight, name)
		if err == nil {
			c.byVolume[name] = u
		}
	}()
}

func statfs(p string) (Usage, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(p, &s); err != nil {
		return Usage{}, err
	}
	bs := int64(s.Bsize)
	u := Usage{
		CapacityBytes:  int64(s.Blocks) * bs,
		AvailableBytes: int64(s.Bavail) * bs,
		UsedBytes:      int64(s.Blocks-s.Bfree) * bs,
		Inodes:         int64(s.Files),
		InodesFree:     int64(s.Ffree),
	}
	u.InodesUsed = u.Inodes - u.InodesFree
	return u, nil
}

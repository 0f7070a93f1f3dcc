package loop

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/volumed/volumed/internal/sysfs"
)

// Index answers Find for many files at once from one pass over sysfs:
// an agent bringing up a hundred volumes would otherwise read every loop
// device's backing_file once per volume. Candidates are still checked by
// identity (Get), so a stale index can only miss a device bound within
// MaxAge by someone else, never name a wrong one; the caller's own
// attaches are noted in it (Note), and a detached device is simply not
// found again by Get.
type Index struct {
	MaxAge time.Duration // 0 means 100 ms

	mu     sync.Mutex
	at     time.Time
	byPath map[string][]int
}

// Note records a device the caller just bound, so the index stays
// current without reading sysfs again.
func (x *Index) Note(d Device) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byPath != nil {
		p := strings.TrimSuffix(d.BackingFile, deletedSuffix)
		x.byPath[p] = append(x.byPath[p], d.Number)
	}
}

// Invalidate makes the next Find read sysfs again.
func (x *Index) Invalidate() {
	x.mu.Lock()
	x.at = time.Time{}
	x.mu.Unlock()
}

func (x *Index) candidates(real string) ([]int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	age := x.MaxAge
	if age <= 0 {
		age = 100 * time.Millisecond
	}
	if x.byPath == nil || time.Since(x.at) > age {
		ents, err := os.ReadDir(sysBlock)
		if err != nil {
			return nil, err
		}
		by := map[string][]int{}
		for _, e := range ents {
			n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "loop"))
			if err != nil || !strings.HasPrefix(e.Name(), "loop") {
				continue
			}
			b, err := sysfs.Text(sysPath(n), "loop", "backing_file")
			if err != nil {
				continue // unbound
			}
			p := strings.TrimSuffix(b, deletedSuffix)
			by[p] = append(by[p], n)
		}
		x.byPath, x.at = by, time.Now()
	}
	return x.byPath[real], nil
}

// Find is loop.Find through the index.
func (x *Index) Find(file string) ([]Device, error) {
	dev, ino, err := FileIdentity(file)
	if err != nil {
		return nil, fmt.Errorf("find loop devices of %s: %w", file, err)
	}
	real, err := filepath.EvalSymlinks(file)
	if err != nil {
		return nil, fmt.Errorf("find loop devices of %s: %w", file, err)
	}
	nums, err := x.candidates(real)
	if err != nil {
		return nil, fmt.Errorf("find loop devices of %s: %w", file, err)
	}
	out := []Device{}
	for _, n := range nums {
		d, err := Get(n)
		if err != nil {
			return nil, fmt.Errorf("find loop devices of %s: %w", file, err)
		}
		if d != nil && d.BackingDev == dev && d.BackingIno == ino {
			out = append(out, *d)
		}
	}
	return out, nil
}

// Package crashcheck starts the real volumed on the disks a power cut
// could have left (replayed from a dm-log-writes log, internal/logwrites)
// and checks what an operator would after the reboot: the state file
// opens, or is found damaged and said so and rebuilt from the kernel; every
// volume comes back Ready; no filesystem that existed is formatted again;
// every file fsync'd before the cut is there, whole.
//
// The logged device holds one filesystem with the agent's state directory
// and the images of some loop volumes. Each state is replayed onto its own
// sparse copy of the device, attached to a loop device, mounted, and
// served to an agent of its own; up to Parallel states at a time.
package crashcheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/volumed/volumed/internal/logwrites"
)

// Root and Mnt stand, in manifests, for where the replayed filesystem is
// mounted and for a directory for the volumes' targets.
const (
	Root = "@ROOT@"
	Mnt  = "@MNT@"
)

// Case is one recording and what to check on every state of it.
type Case struct {
	Bin  string // the volumed binary
	Base string // the logged device's bytes before logging began
	Log  *logwrites.Log
	// Manifests, by file name, with Root and Mnt in their paths.
	Manifests map[string]string
	StateDir  string   // the state directory, relative to the filesystem's root
	Volumes   []Volume // the volumes whose images are on the logged filesystem
	Proofs    []Proof
	Known     []Known
	Work      string // a directory for the states' images and mounts
	Parallel  int    // states checked at once; 0 means 2
	// Timeout bounds one state's check (the agent's convergence);
	// 0 means 3 minutes. A failure bound, not a measure.
	Timeout time.Duration
	Logf    func(format string, args ...any)
}

// Volume is a loop volume whose image lives on the logged filesystem.
type Volume struct {
	Name   string
	Image  string // relative to the filesystem's root
	Target string // its first mount target, relative to Mnt
}

// Proof is a file written into a volume and fsync'd once the volume was
// Ready; After is the index of the log entry (a mark) logged once the
// fsync returned: every state ending after it must hold the file.
type Proof struct {
	Volume  string
	Path    string // relative to the volume's Target
	Content string
	After   int
}

// Known is a filesystem the recorder saw on a volume once it was Ready:
// every state ending after entry After must hold it, not a new one.
type Known struct {
	Volume, UUID string
	After        int
}

// Result is what one state showed.
type Result struct {
	State logwrites.State
	// Problems are broken promises; empty when the state passed.
	Problems []string
	// Recovered: the agent found the state file damaged and said so.
	Recovered bool
	// Damaged: bbolt's own check of the state file, before the agent
	// started, found it damaged ("" if not, or if there was none).
	Damaged string
	// Formatted lists the volumes that had no filesystem in this state
	// and were formatted (a fresh start, not a second format).
	Formatted []string
	Log       string // the agent's output, kept when there are Problems
}

// Run checks every state and returns one result each, in the order given
// states sort to (logwrites.Order).
func Run(ctx context.Context, c Case, states []logwrites.State) ([]Result, error) {
	logwrites.Order(states)
	if c.Parallel <= 0 {
		c.Parallel = 2
	}
	if c.Timeout <= 0 {
		c.Timeout = 3 * time.Minute
	}
	base, err := newReplayer(c)
	if err != nil {
		return nil, err
	}
	defer base.close()
	results := make([]Result, len(states))
	jobs := make(chan int)
	var wg sync.WaitGroup
	var prepErr error
	for range c.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				dir := filepath.Join(c.Work, fmt.Sprintf("s%d", i))
				results[i] = check(ctx, c, states[i], dir)
				if err := os.RemoveAll(dir); err != nil {
					c.Logf("remove %s: %v", dir, err)
				}
			}
		}()
	}
	for i, st := range states {
		if ctx.Err() != nil {
			break
		}
		dir := filepath.Join(c.Work, fmt.Sprintf("s%d", i))
		if err := base.prepare(st, dir); err != nil {
			prepErr = fmt.Errorf("state %v: %w", st, err)
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if prepErr != nil {
		return nil, prepErr
	}
	return results, ctx.Err()
}

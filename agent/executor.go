package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/volumed/volumed/internal/readonce"
)

// Backoff bounds, as in the kubelet's exponential backoff.
const (
	initialBackoff = 500 * time.Millisecond
	maxBackoff     = 2*time.Minute + 2*time.Second
)

// Executor runs operations: at most one per volume at a time, volumes in
// parallel up to a bound, and a failed (volume, operation) is not retried
// before its backoff has passed.
type Executor struct {
	now func() time.Time
	sem chan struct{}
	wg  sync.WaitGroup
	// timeout bounds each operation (0: unbounded). A slow or hung disk
	// must end an operation with a reason and a retry, not leave the
	// volume in its phase with nothing said; see timedOut.
	timeout time.Duration

	mu      sync.Mutex
	running map[string]string // volume -> operation
	failed  map[opKey]*failure
	// slotted: volumes whose operation holds a slot of sem now (see Yield).
	slotted map[string]bool
	// yielded counts the operations waiting without their slot, at most
	// yieldMax: each waits deep in its call stack, whose memory stays
	// (docs/performance.md has what a thousand kept), and a commit takes
	// at most 256 (store.maxBatch), so more gain nothing.
	yielded, yieldMax int
}

type opKey struct{ volume, op string }

type failure struct {
	count int
	until time.Time // zero for a permanent failure: not retried before Reset
	err   error
}

// NewExecutor returns an executor that runs at most parallel operations
// at once. now is the clock (time.Now outside tests).
func NewExecutor(parallel int, now func() time.Time) *Executor {
	if parallel < 1 {
		parallel = 1
	}
	return &Executor{
		now:      now,
		sem:      make(chan struct{}, parallel),
		running:  map[string]string{},
		failed:   map[opKey]*failure{},
		slotted:  map[string]bool{},
		yieldMax: 256,
	}
}

// Start runs fn for op in a new goroutine unless the volume already has
// an operation running or the (volume, operation) is backing off. It
// returns whether it started and, when backing off, until when. done is
// called with fn's result after the bookkeeping is updated.
func (e *Executor) Start(ctx context.Context, volume, op string, fn func(context.Context) error, done func(error)) (bool, time.Time) {
	return e.StartIf(ctx, volume, op, nil, fn, done)
}

// StartIf is Start that also refuses when current, asked once no
// operation of the volume runs, says the plan of op is stale: an
// operation of the volume finished after the plan's snapshot, and op
// would repeat or undo what it did. A refusal is no failure: the pass
// the finished operation triggers plans again from its outcome.
func (e *Executor) StartIf(ctx context.Context, volume, op string, current func() bool, fn func(context.Context) error, done func(error)) (bool, time.Time) {
	e.mu.Lock()
	if _, busy := e.running[volume]; busy {
		e.mu.Unlock()
		return false, time.Time{}
	}
	// An operation records its outcome before it leaves running, so
	// the check sees the outcome of every operation that has finished.
	if current != nil && !current() {
		e.mu.Unlock()
		return false, time.Time{}
	}
	if f := e.failed[opKey{volume, op}]; f != nil && (f.until.IsZero() || e.now().Before(f.until)) {
		e.mu.Unlock()
		return false, f.until
	}
	e.running[volume] = op
	e.wg.Add(1)
	e.mu.Unlock()

	go func() {
		defer e.wg.Done()
		var err error
		select {
		case e.sem <- struct{}{}:
			e.slot(volume, true)
			err = e.run(ctx, op, fn)
			e.slot(volume, false)
			<-e.sem
		case <-ctx.Done():
			err = ctx.Err()
		}
		e.finish(volume, op, err)
		if done != nil {
			done(err)
		}
	}()
	return true, time.Time{}
}

// run runs fn under the executor's bound. The bound starts once the
// operation has its slot: waiting for one is no fault of the device's.
func (e *Executor) run(ctx context.Context, op string, fn func(context.Context) error) error {
	// Each operation looks at the host afresh, once: what it reads is
	// shared by its own steps only, and its writes drop it.
	ctx = readonce.Open(ctx)
	if e.timeout <= 0 {
		return fn(ctx)
	}
	opCtx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	err := fn(opCtx)
	return timedOut(op, e.timeout, ctx.Err(), opCtx.Err(), err)
}

// timedOut says why an operation failed when its own bound ended it (the
// agent's context still live, the operation's past its deadline): the
// helper it ran was killed or its wait given up, and the error says so
// with the bound, instead of a bare "context deadline exceeded" or
// "signal: killed". Any other outcome is err unchanged.
func timedOut(op string, bound time.Duration, parentErr, opErr, err error) error {
	if err == nil || parentErr != nil || !errors.Is(opErr, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%s timed out after %s (--op-timeout): the device or a helper did not answer in time, so it was stopped and is retried after a backoff: %w", op, bound, err)
}

func (e *Executor) slot(volume string, held bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if held {
		e.slotted[volume] = true
	} else {
		delete(e.slotted, volume)
	}
}

// Yield gives up the slot the volume's running operation holds, while it
// waits for something that is no work of the kernel's (its intent's
// fsync), and returns what takes a slot back, waiting for one. The bound
// is on work: holding a slot through that wait let only as many intents
// as slots share each commit, and with thousands of volumes a commit
// carried three of them. Without a slot held (an operation run outside
// the executor), or with yieldMax operations waiting so already, both are
// no-ops.
func (e *Executor) Yield(volume string) (resume func()) {
	e.mu.Lock()
	held := e.slotted[volume] && e.yielded < e.yieldMax
	if held {
		delete(e.slotted, volume)
		e.yielded++
	}
	e.mu.Unlock()
	if !held {
		return func() {}
	}
	<-e.sem
	return func() {
		e.sem <- struct{}{}
		e.mu.Lock()
		e.slotted[volume] = true
		e.yielded--
		e.mu.Unlock()
	}
}

func (e *Executor) finish(volume, op string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.running, volume)
	k := opKey{volume, op}
	if err == nil {
		delete(e.failed, k)
		return
	}
	f := e.failed[k]
	if f == nil {
		f = &failure{}
		e.failed[k] = f
	}
	f.count++
	f.err = err
	f.until = e.now().Add(backoffFor(f.count))
	if isPermanent(err) {
		f.until = time.Time{}
	}
}

func backoffFor(failures int) time.Duration {
	d := initialBackoff
	for i := 1; i < failures; i++ {
		d *= 2
		if d >= maxBackoff {
			return maxBackoff
		}
	}
	return d
}

// Reset forgets the failures of every operation of a volume, e.g. because
// its manifest changed and the old errors say nothing about the new spec.
func (e *Executor) Reset(volume string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.failed {
		if k.volume == volume {
			delete(e.failed, k)
		}
	}
}

// Running returns the operation running for the volume, if any.
func (e *Executor) Running(volume string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	op, ok := e.running[volume]
	return op, ok
}

// RunningVolumes names the volumes with an operation running or queued.
func (e *Executor) RunningVolumes() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.running))
	for v := range e.running {
		out = append(out, v)
	}
	return out
}

// Busy reports how many operations are running or queued.
func (e *Executor) Busy() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running)
}

// Failure describes the latest failure of a volume (any operation).
type Failure struct {
	Op      string
	Err     error
	Retries int
	Until   time.Time
}

// LastFailure returns the most recent failure of a volume still on record.
func (e *Executor) LastFailure(volume string) (Failure, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var best Failure
	found := false
	for k, f := range e.failed {
		if k.volume != volume {
			continue
		}
		if !found || f.until.After(best.Until) {
			best = Failure{Op: k.op, Err: f.err, Retries: f.count, Until: f.until}
			found = true
		}
	}
	return best, found
}

// NextRetry is the earliest instant a backing-off operation may run again
// (zero if none), so the reconciler can wake up then instead of polling.
func (e *Executor) NextRetry() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	var t time.Time
	now := e.now()
	for _, f := range e.failed {
		if f.until.After(now) && (t.IsZero() || f.until.Before(t)) {
			t = f.until
		}
	}
	return t
}

// BackoffsEnded names the volumes with an operation whose backoff ended
// in (after, upTo]: what they were refused they may start now.
func (e *Executor) BackoffsEnded(after, upTo time.Time) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for k, f := range e.failed {
		if f.until.After(after) && !f.until.After(upTo) {
			out = append(out, k.volume)
		}
	}
	return out
}

// Wait blocks until every started operation has finished.
func (e *Executor) Wait() { e.wg.Wait() }

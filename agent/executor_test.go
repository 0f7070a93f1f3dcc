package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/volumed/volumed/store"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestExecutorOneOperationPerVolume(t *testing.T) {
	e := NewExecutor(8, time.Now)
	release := make(chan struct{})
	var running, maxRunning atomic.Int32
	fn := func(context.Context) error {
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		return nil
	}
	ctx := context.Background()
	if ok, _ := e.Start(ctx, "a", OpAttach, fn, nil); !ok {
		t.Fatal("first operation of a did not start")
	}
	if ok, _ := e.Start(ctx, "a", OpMountDevice, fn, nil); ok {
		t.Fatal("second operation of a started while the first runs")
	}
	if ok, _ := e.Start(ctx, "b", OpAttach, fn, nil); !ok {
		t.Fatal("operation of another volume did not start")
	}
	if op, ok := e.Running("a"); !ok || op != OpAttach {
		t.Fatalf("Running(a) = %q, %v", op, ok)
	}
	// Both volumes' operations run at once; wait for that to happen.
	for deadline := time.Now().Add(10 * time.Second); running.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(release)
	e.Wait()
	if got := maxRunning.Load(); got != 2 {
		t.Fatalf("max concurrent operations = %d, want 2 (a and b in parallel)", got)
	}
	if e.Busy() != 0 {
		t.Fatal("executor still busy after Wait")
	}
}

func TestExecutorParallelBound(t *testing.T) {
	e := NewExecutor(3, time.Now)
	var running, maxRunning atomic.Int32
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := 0; i < 10; i++ {
		wg.Add(1)
		name := string(rune('a' + i))
		e.Start(context.Background(), name, OpAttach, func(context.Context) error {
			n := running.Add(1)
			for {
				m := maxRunning.Load()
				if n <= m || maxRunning.CompareAndSwap(m, n) {
					break
				}
			}
			<-gate
			running.Add(-1)
			return nil
		}, func(error) { wg.Done() })
	}
	close(gate)
	wg.Wait()
	if got := maxRunning.Load(); got > 3 {
		t.Fatalf("%d operations ran at once, bound is 3", got)
	}
}

func TestExecutorBackoff(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	e := NewExecutor(1, clock.Now)
	boom := errors.New("boom")
	fail := func(context.Context) error { return boom }
	run := func(op string, fn func(context.Context) error) (bool, time.Time) {
		ok, until := e.Start(context.Background(), "a", op, fn, nil)
		e.Wait()
		return ok, until
	}
	// Delays double from 500 ms and stop at about 2 minutes.
	wantDelays := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, 64 * time.Second, maxBackoff, maxBackoff}
	for i, d := range wantDelays {
		if ok, _ := run(OpAttach, fail); !ok {
			t.Fatalf("attempt %d did not start", i+1)
		}
		f, ok := e.LastFailure("a")
		if !ok || f.Retries != i+1 || !errors.Is(f.Err, boom) {
			t.Fatalf("after attempt %d: failure %+v", i+1, f)
		}
		if got := f.Until.Sub(clock.Now()); got != d {
			t.Fatalf("after %d failures backoff = %s, want %s", i+1, got, d)
		}
		clock.Advance(d - time.Millisecond)
		if ok, until := run(OpAttach, fail); ok || !until.Equal(f.Until) {
			t.Fatalf("attempt during backoff started (or wrong until %s)", until)
		}
		if next := e.NextRetry(); !next.Equal(f.Until) {
			t.Fatalf("NextRetry = %s, want %s", next, f.Until)
		}
		clock.Advance(time.Millisecond)
	}
	// Another operation of the same volume has its own backoff.
	if ok, _ := run(OpDetach, func(context.Context) error { return nil }); !ok {
		t.Fatal("a different operation was held back by attach's backoff")
	}
	// A manifest change resets the backoff.
	run(OpAttach, fail)
	e.Reset("a")
	if ok, _ := run(OpAttach, func(context.Context) error { return nil }); !ok {
		t.Fatal("backoff not reset by Reset")
	}
	if _, ok := e.LastFailure("a"); ok {
		t.Fatal("failure still recorded after success")
	}
}

// An operation that yields its slot (waiting for its intent's commit)
// lets another run meanwhile, and takes a slot back before it goes on.
func TestYieldLetsAnotherOperationRun(t *testing.T) {
	ctx := context.Background()
	e := NewExecutor(1, time.Now)
	aHolds, bRan, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	e.Start(ctx, "a", OpAttach, func(context.Context) error {
		close(aHolds)
		resume := e.Yield("a")
		select {
		case <-bRan:
		case <-time.After(10 * time.Second):
			t.Error("b never ran while a waited without its slot")
		}
		resume()
		note("a resumed")
		return nil
	}, func(error) { close(aDone) })
	<-aHolds
	e.Start(ctx, "b", OpAttach, func(context.Context) error {
		note("b")
		close(bRan)
		return nil
	}, nil)
	<-aDone
	e.Wait()
	if want := []string{"b", "a resumed"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	// Outside the executor there is no slot to give up.
	e.Yield("nobody")()
}

// Many volumes' intents share a commit although few operations run at
// once: waiting for the fsync does not hold a slot. Holding it, every
// commit carried at most as many intents as there are slots (at 1000
// volumes, about three), and the start waited on hundreds of commits.
func TestIntentsOfAWaveShareCommits(t *testing.T) {
	ctx := context.Background()
	a := sessionAgent(t, &fakeTarget{})
	a.exec = NewExecutor(2, time.Now)
	a.state.OnCommitWait(a.exec.Yield)
	st := a.cfg.Store.(*store.Store)
	before := st.Commits()
	const n = 40
	for i := range n {
		d := netVolume(fmt.Sprintf("v%02d", i))
		a.exec.Start(ctx, d.Name, OpAttach, func(ctx context.Context) error { return a.opAttach(ctx, d) }, nil)
	}
	a.exec.Wait()
	commits := st.Commits() - before
	if commits > n/4 {
		t.Errorf("%d intents took %d commits with 2 slots; want them to share commits (at most %d)", n, commits, n/4)
	}
	for i := range n {
		if rec := a.state.Get(fmt.Sprintf("v%02d", i)); rec == nil || rec.Attachment == nil {
			t.Fatalf("v%02d not attached: %+v", i, rec)
		}
	}
}

// At most yieldMax operations wait without their slot: each waits deep in
// its call stack, and a thousand of them kept megabytes of stacks. One
// more keeps its slot through the wait.
func TestYieldIsBounded(t *testing.T) {
	e := NewExecutor(2, time.Now)
	e.yieldMax = 1
	ctx := context.Background()
	aYielded, bChecked, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var bHeld bool
	e.Start(ctx, "a", OpAttach, func(context.Context) error {
		resume := e.Yield("a")
		close(aYielded)
		<-release
		resume()
		return nil
	}, nil)
	<-aYielded
	e.Start(ctx, "b", OpAttach, func(context.Context) error {
		resume := e.Yield("b")
		// b's slot and no other is taken: a gave its own up.
		bHeld = len(e.sem) == 1
		close(bChecked)
		resume()
		return nil
	}, nil)
	<-bChecked
	close(release)
	e.Wait()
	if !bHeld {
		t.Error("b gave up its slot although a already waited without one (yieldMax 1)")
	}
}

package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

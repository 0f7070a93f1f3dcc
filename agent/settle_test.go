package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/volumed/volumed/store"
)

// failingState is a state file that refuses writes while failing is
// set, as a failing or full state disk does; it counts the retries of
// unrecorded outcomes (Settle) and says when one went through.
type failingState struct {
	Store
	mu       sync.Mutex
	failing  bool
	settles  int
	recorded chan string
}

func (f *failingState) fail(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = on
}

func (f *failingState) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return errors.New("input/output error")
	}
	return nil
}

func (f *failingState) Settle(_ []uint64, name string, _ *store.Volume) error {
	f.mu.Lock()
	f.settles++
	f.mu.Unlock()
	if err := f.err(); err != nil {
		return err
	}
	f.recorded <- name
	return nil
}

func (f *failingState) Begin(store.Intent) (uint64, error) {
	if err := f.err(); err != nil {
		return 0, err
	}
	return 1, nil
}

func (f *failingState) FinishLater(uint64, string, *store.Volume, func(error)) error { return nil }

// The retry of an outcome the state file did not take waits as a failed
// operation does, 500 ms doubling, not a second each time for as long
// as the disk fails (test/os TestFlakeyStateDirectory: a busy loop of
// writes to the failing disk); it starts again from 500 ms once one went
// through, and an intent committed (the disk takes writes again) ends
// the wait at once. Meanwhile the volume says StateNotRecorded.
func TestUnrecordedRetryBacksOff(t *testing.T) {
	st := &failingState{failing: true, recorded: make(chan string, 1)}
	a := New(Config{StateDir: t.TempDir(), Store: st})
	a.state = NewState(st, time.Now, map[string]*store.Volume{"b": {Name: "b", Kind: "loop"}})
	a.state.OnRecorded(a.noteRecorded)

	// Each wait the loop asks for is told to the test, which ends it.
	type wait struct {
		d   time.Duration
		end chan time.Time
	}
	waits := make(chan wait)
	ctx, cancel := context.WithCancel(context.Background())
	a.settleAfter = func(d time.Duration) <-chan time.Time {
		w := wait{d, make(chan time.Time, 1)}
		select {
		case waits <- w:
		case <-ctx.Done():
		}
		return w.end
	}
	// recorded is which volume's outcome went through; the bound is a
	// failure's, not a measure.
	recorded := func(why string) {
		t.Helper()
		select {
		case name := <-st.recorded:
			if name != "b" {
				t.Fatalf("recorded %s, want b", name)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("b's outcome never recorded %s", why)
		}
	}
	done := make(chan struct{})
	go func() { a.settleLoop(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// waitsUntilRecorded ends n waits with the disk failing, heals it,
	// ends the next, and returns the waits asked for.
	waitsUntilRecorded := func(n int) []time.Duration {
		t.Helper()
		var got []time.Duration
		for i := 0; i <= n; i++ {
			w := <-waits
			got = append(got, w.d)
			if i == n {
				st.fail(false)
			}
			w.end <- time.Time{}
		}
		recorded("once the disk healed")
		return got
	}
	a.state.KeepIntent("b", 7, errors.New("record outcome of detach: input/output error"))
	if !a.conds.Has("b", CondStateNotRecorded) {
		t.Fatalf("conditions %+v, want StateNotRecorded", a.conds.Of("b"))
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	if got := waitsUntilRecorded(4); !slices.Equal(got, want) {
		t.Errorf("waits between retries %v, want %v", got, want)
	}
	if a.conds.Has("b", CondStateNotRecorded) {
		t.Errorf("StateNotRecorded stays once recorded: %+v", a.conds.Of("b"))
	}

	// A second failure starts from the first backoff again.
	st.fail(true)
	a.state.KeepIntent("b", 8, errors.New("record outcome of attach: input/output error"))
	if got := waitsUntilRecorded(1); !slices.Equal(got, want[:2]) {
		t.Errorf("after a success, waits %v, want %v", got, want[:2])
	}

	// An intent committed while the retry waits: tried at once.
	st.fail(true)
	a.state.KeepIntent("b", 9, errors.New("record outcome of detach: input/output error"))
	<-waits // never ended
	st.fail(false)
	if err := a.state.Do("c", "loop", OpAttach, nil, func(*store.Volume) error { return nil }); err != nil {
		t.Fatal(err)
	}
	recorded("at the commit of another volume's intent")
}

package store

// How writes share commits: batches, a failing member, outcomes that ride the next intent, Flush.

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/bbolt"
)

func TestConcurrentWritersShareCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	var (
		mu      sync.Mutex
		callers int
	)
	opts := testOpts()
	opts.OnCommit = func(d time.Duration, n int) {
		mu.Lock()
		callers += n
		mu.Unlock()
	}
	s := mustOpen(t, path, opts)
	before := s.Commits()

	const n = 50
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			name := fmt.Sprintf("vol-%02d", i)
			id, err := s.Begin(Intent{Volume: name, Op: "attach"})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Finish(id, name, &Volume{Name: name, Kind: "loop"})
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	commits := s.Commits() - before
	mu.Lock()
	served := callers
	mu.Unlock()
	if served != 2*n {
		t.Errorf("OnCommit saw %d callers, want %d", served, 2*n)
	}
	if commits >= 2*n {
		t.Errorf("%d calls took %d commits; parallel callers did not share fsyncs", 2*n, commits)
	}
	t.Logf("%d calls, %d commits", 2*n, commits)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, testOpts())
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != n || len(intents) != 0 {
		t.Errorf("after reopen: %d volumes, %d intents; want %d, 0", len(vols), len(intents), n)
	}
}

func TestFailingBatchMemberDoesNotFailOthers(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
	put := func(name string) *request {
		return &request{done: make(chan error, 1), fn: func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketVolumes).Put([]byte(name), []byte(`{"name":"`+name+`"}`))
		}}
	}
	bad := errors.New("bad request")
	failing := &request{done: make(chan error, 1), fn: func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketVolumes).Put([]byte("half"), []byte(`{"name":"half"}`)); err != nil {
			return err
		}
		return bad
	}}
	a, b := put("a"), put("b")
	before := s.Commits()
	s.commit([]*request{a, failing, b})

	if err := <-a.done; err != nil {
		t.Errorf("a: %v", err)
	}
	if err := <-b.done; err != nil {
		t.Errorf("b: %v", err)
	}
	if err := <-failing.done; !errors.Is(err, bad) {
		t.Errorf("failing request got %v, want %v", err, bad)
	}
	if got := s.Commits() - before; got != 1 {
		t.Errorf("commits = %d, want 1 (a and b together)", got)
	}
	vols, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if vols["a"] == nil || vols["b"] == nil || vols["half"] != nil {
		t.Errorf("volumes = %v, want a and b without the failed request's write", vols)
	}
}

// FinishLater returns before its fsync; whatever it queued is on disk
// after Close, and a later Begin's commit carries it too.
func TestFinishLaterIsCommittedByCloseAndNextCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := mustOpen(t, path, testOpts())
	var ids []uint64
	for i := 0; i < 50; i++ {
		id, err := s.Begin(Intent{Volume: fmt.Sprintf("v%d", i), Op: "attach"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i, id := range ids {
		if err := s.FinishLater(id, fmt.Sprintf("v%d", i), &Volume{Name: fmt.Sprintf("v%d", i), Kind: "loop"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishLater(1, "x", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("FinishLater after Close: %v, want ErrClosed", err)
	}
	s = mustOpen(t, path, testOpts())
	defer s.Close()
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 50 || len(intents) != 0 {
		t.Fatalf("after Close: %d records, %d intents; want 50, 0", len(vols), len(intents))
	}
}

// Outcomes nobody waits for ride the next intent's fsync instead of
// costing one of their own (which also delayed that intent by a whole
// commit), and still reach the disk when no intent comes.
func TestOutcomesRideTheNextIntent(t *testing.T) {
	// In a bubble the clock moves only when every goroutine waits: the
	// ride's timer cannot fire while the test is still queueing.
	synctest.Test(t, func(t *testing.T) {
		s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
		defer s.Close()
		var ids []uint64
		for i := 0; i < 10; i++ {
			id, err := s.Begin(Intent{Volume: fmt.Sprintf("v%d", i), Op: "attach"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		ignore := func(error) {}
		before := s.Commits()
		for i, id := range ids[:9] {
			if err := s.FinishLater(id, fmt.Sprintf("v%d", i), &Volume{Name: fmt.Sprintf("v%d", i), Kind: "loop"}, ignore); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Begin(Intent{Volume: "v0", Op: "mount_device"}); err != nil {
			t.Fatal(err)
		}
		if got := s.Commits() - before; got != 1 {
			t.Errorf("9 outcomes and an intent took %d commits, want 1", got)
		}
		vols, _, err := s.Load()
		if err != nil || len(vols) != 9 {
			t.Fatalf("after the intent's commit: %d records (%v), want the 9 outcomes", len(vols), err)
		}

		before = s.Commits()
		if err := s.FinishLater(ids[9], "v9", &Volume{Name: "v9", Kind: "loop"}, ignore); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the committer holds it, waiting for company
		if got := s.Commits() - before; got != 0 {
			t.Errorf("an outcome alone took %d commits at once, want it to ride", got)
		}
		time.Sleep(rideDelay)
		synctest.Wait()
		if vols, _, err := s.Load(); err != nil || vols["v9"] == nil {
			t.Fatalf("an outcome alone is not committed after %v: %v", rideDelay, err)
		}
	})
}

// Flush sends what rides at once: when the agent has converged no intent
// comes to carry the last outcomes, and a power cut right after would
// leave their intents to resolve.
func TestFlushCommitsWhatRides(t *testing.T) {
	// In a bubble the clock moves only when every goroutine waits, so
	// "at once" is exact: the ride's timer has not fired.
	synctest.Test(t, func(t *testing.T) {
		s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
		defer s.Close()
		id, err := s.Begin(Intent{Volume: "a", Op: "publish"})
		if err != nil {
			t.Fatal(err)
		}
		before := s.Commits()
		s.Flush() // nothing rides: no commit
		if err := s.FinishLater(id, "a", &Volume{Name: "a", Kind: "loop"}, func(error) {}); err != nil {
			t.Fatal(err)
		}
		s.Flush()
		synctest.Wait() // the commit is done, and the bubble's clock has not moved
		if got := s.Commits() - before; got != 1 {
			t.Errorf("%d commits at once, want 1 (an empty Flush commits nothing; what rides is sent before the %v ride ends)", got, rideDelay)
		}
		if _, intents, err := s.Load(); err != nil || len(intents) != 0 {
			t.Errorf("intents on disk after the flush: %v, %v", intents, err)
		}
	})
}

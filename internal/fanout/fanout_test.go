package fanout

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestEachCallsEveryIndexOnce(t *testing.T) {
	for _, tc := range []struct{ n, workers int }{{0, 4}, {1, 4}, {3, 8}, {100, 4}, {5, 1}} {
		var mu sync.Mutex
		seen := map[int]int{}
		Each(tc.n, tc.workers, func(i int) {
			mu.Lock()
			seen[i]++
			mu.Unlock()
		})
		if len(seen) != tc.n {
			t.Errorf("n=%d workers=%d: %d indexes called, want %d", tc.n, tc.workers, len(seen), tc.n)
		}
		for i, c := range seen {
			if i < 0 || i >= tc.n || c != 1 {
				t.Errorf("n=%d workers=%d: index %d called %d times", tc.n, tc.workers, i, c)
			}
		}
	}
}

func TestEachBoundsItsGoroutines(t *testing.T) {
	const workers = 3
	var now, most atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 50)
	done := make(chan struct{})
	go func() {
		Each(50, workers, func(int) {
			n := now.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			started <- struct{}{}
			<-release
			now.Add(-1)
		})
		close(done)
	}()
	for range workers {
		<-started
	}
	close(release)
	<-done
	if m := most.Load(); m != workers {
		t.Errorf("%d calls ran at once, want %d", m, workers)
	}
}

package agent

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// A statfs that hangs (a dead filesystem) never blocks readers of the
// cache, and no second statfs piles up behind it.
func TestUsageCacheNeverWaitsOnAHungStatfs(t *testing.T) {
	// In a bubble, synctest.Wait returns once every statfs goroutine has
	// returned or is stuck on hang: the counts below are exact, where a
	// sleep only gave the goroutines some time to start.
	synctest.Test(t, func(t *testing.T) {
		c := newUsageCache()
		hang := make(chan struct{})
		defer close(hang)
		var hungCalls atomic.Int32
		c.stat = func(p string) (Usage, error) {
			if p == "/hung" {
				hungCalls.Add(1)
				<-hang
			}
			return Usage{CapacityBytes: 42}, nil
		}
		paths := map[string]string{"ok": "/ok", "hung": "/hung"}
		c.refresh(paths)
		synctest.Wait()
		if u, ok := c.get("ok"); !ok || u.CapacityBytes != 42 {
			t.Fatalf("usage of the healthy volume: %+v, %v; want 42 bytes", u, ok)
		}
		if _, ok := c.get("hung"); ok {
			t.Fatal("usage reported for a volume whose statfs has not returned")
		}
		c.refresh(paths)
		c.refresh(paths)
		synctest.Wait()
		if n := hungCalls.Load(); n != 1 {
			t.Fatalf("%d statfs calls on the hung volume, want 1 (no pile-up)", n)
		}
		if u, ok := c.get("ok"); !ok || u.CapacityBytes != 42 {
			t.Fatalf("usage of the healthy volume after the hung one was skipped: %+v, %v", u, ok)
		}
	})
}

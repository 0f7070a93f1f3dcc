package agent

import (
	"sync/atomic"
	"testing"
	"time"
)

// A statfs that hangs (a dead filesystem) never blocks readers of the
// cache, and no second statfs piles up behind it.
func TestUsageCacheNeverWaitsOnAHungStatfs(t *testing.T) {
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		if u, ok := c.get("ok"); ok && u.CapacityBytes == 42 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("usage of the healthy volume never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	if _, ok := c.get("hung"); ok {
		t.Fatal("usage reported for a volume whose statfs has not returned")
	}
	c.refresh(paths)
	c.refresh(paths)
	time.Sleep(10 * time.Millisecond)
	if n := hungCalls.Load(); n != 1 {
		t.Fatalf("%d statfs calls on the hung volume, want 1 (no pile-up)", n)
	}
}

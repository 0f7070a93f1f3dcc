package agent

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

// A settle after a change of one volume measures that volume's usage
// alone: the others keep theirs, a volume no longer mounted loses its.
func TestSettleMeasuresOnlyWhatChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newUsageCache()
		var mu sync.Mutex
		var stated []string
		c.stat = func(p string) (Usage, error) {
			mu.Lock()
			defer mu.Unlock()
			stated = append(stated, p)
			return Usage{CapacityBytes: int64(len(stated))}, nil
		}
		c.refresh(map[string]string{"a": "/a", "b": "/b", "c": "/c"})
		synctest.Wait()
		stated = nil

		var w settleWork
		w.add(false, []string{"b"})
		w.add(false, []string{"c", "b"})
		all, names := w.take()
		slices.Sort(names)
		if all || !slices.Equal(names, []string{"b", "c"}) {
			t.Fatalf("gathered all=%v %v, want b and c", all, names)
		}
		c.refreshSome(names, map[string]string{"b": "/b"}) // c unmounted
		synctest.Wait()
		if !slices.Equal(stated, []string{"/b"}) {
			t.Errorf("statfs of %v, want /b alone", stated)
		}
		if _, ok := c.get("a"); !ok {
			t.Error("a's usage was dropped by a settle that did not concern it")
		}
		if _, ok := c.get("c"); ok {
			t.Error("c's usage kept after it was unmounted")
		}
		if all, names := w.take(); all || len(names) != 0 {
			t.Errorf("take after take: all=%v %v", all, names)
		}
		w.add(false, []string{"a"})
		w.add(true, nil)
		if all, _ := w.take(); !all {
			t.Error("a full pass since the last settle must measure every volume")
		}
	})
}

func TestReleaseHeapAfter(t *testing.T) {
	for _, tc := range []struct {
		all     bool
		planned int
		want    bool
	}{
		{true, 0, true},
		{false, 1, false},
		{false, heapBurst - 1, false},
		{false, heapBurst, true},
	} {
		if got := releaseHeapAfter(tc.all, tc.planned); got != tc.want {
			t.Errorf("releaseHeapAfter(%v, %d) = %v, want %v", tc.all, tc.planned, got, tc.want)
		}
	}
}

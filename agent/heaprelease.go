package agent

import (
	"net/http"
	"runtime/debug"
	"sync"
	"time"
)

// scrapeRelease is how often, at most, a scrape hands its garbage back.
const scrapeRelease = 10 * time.Second

// heapRelease hands the heap a metrics scrape grew back to the kernel
// once the answer is written. A scrape builds a series per volume, phase
// and condition type: megabytes of garbage at a thousand volumes, which
// the runtime keeps for minutes (docs/performance.md). Released at most
// once per interval, so a scraper polling fast costs one forced
// collection per interval.
type heapRelease struct {
	every   time.Duration
	now     func() time.Time
	release func()

	mu   sync.Mutex
	last time.Time
}

func newHeapRelease(now func() time.Time) *heapRelease {
	return &heapRelease{every: scrapeRelease, now: now, release: debug.FreeOSMemory}
}

func (h *heapRelease) after(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		h.maybe()
	})
}

func (h *heapRelease) maybe() {
	h.mu.Lock()
	t := h.now()
	due := h.last.IsZero() || t.Sub(h.last) >= h.every
	if due {
		h.last = t
	}
	h.mu.Unlock()
	if due {
		h.release()
	}
}

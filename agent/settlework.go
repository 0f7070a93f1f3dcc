// What the passes did since the agent last settled.

package agent

// settleWork gathers the volumes the passes planned since the last
// settle (all of them after a full pass): once the agent settles, only
// their usage is measured again, and the heap is handed back only after
// a burst. Measuring every volume and collecting the heap at each settle
// was a fifth of one manifest edit's CPU among 1000 volumes
// (docs/performance.md). Only the reconcile loop uses it.
type settleWork struct {
	all   bool
	names map[string]bool
}

func (w *settleWork) add(all bool, names []string) {
	w.all = w.all || all
	if w.all {
		w.names = nil
		return
	}
	if w.names == nil {
		w.names = map[string]bool{}
	}
	for _, n := range names {
		w.names[n] = true
	}
}

// take returns what was gathered and forgets it.
func (w *settleWork) take() (all bool, names []string) {
	all = w.all
	for n := range w.names {
		names = append(names, n)
	}
	w.all, w.names = false, nil
	return all, names
}

// heapBurst: a settle after this many volumes planned (or a full pass)
// hands the heap back to the kernel (debug.FreeOSMemory, a full
// collection: a few ms at 1000 volumes); after fewer, the runtime's own
// scavenger is enough.
const heapBurst = 64

// releaseHeapAfter says whether a settle hands the heap back.
func releaseHeapAfter(all bool, planned int) bool { return all || planned >= heapBurst }

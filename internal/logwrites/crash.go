package logwrites

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// State is a disk a power cut could leave: the entries before End, in log
// order, less the ones in Drop (volatile writes the cache lost).
type State struct {
	End  int
	Drop []int
}

func (s State) String() string {
	if len(s.Drop) == 0 {
		return fmt.Sprintf("entries [0,%d)", s.End)
	}
	return fmt.Sprintf("entries [0,%d) less %v", s.End, s.Drop)
}

// Dropped returns Drop as a set, for Replay.
func (s State) Dropped() map[int]bool {
	m := make(map[int]bool, len(s.Drop))
	for _, i := range s.Drop {
		m[i] = true
	}
	return m
}

// Durable returns the number of leading entries that every state ending at
// end holds: all before the last FLUSH entry below end. The target logs a
// FLUSH once it completed, after every write that completed before it was
// issued, so those are on stable storage.
func (l *Log) Durable(end int) int {
	for i := min(end, len(l.Entries)) - 1; i >= 0; i-- {
		if l.Entries[i].Flush() {
			return i
		}
	}
	return 0
}

// Volatile returns the entries before end that a cache may still hold
// when the power goes at end: writes since the last flush, except FUA
// ones, which are durable when they complete (and so when logged).
func (l *Log) Volatile(end int) []int {
	var v []int
	for _, e := range l.Entries[l.Durable(end):min(end, len(l.Entries))] {
		if e.Writes() && !e.FUA() {
			v = append(v, e.Index)
		}
	}
	return v
}

// Points returns the state at each FLUSH or FUA entry and at the end of
// the log, with every write logged so far applied: the disk as the log
// says it was at that instant.
func (l *Log) Points() []State {
	var out []State
	for _, e := range l.Entries {
		if e.Flush() || e.FUA() {
			out = append(out, State{End: e.Index + 1})
		}
	}
	if n := len(l.Entries); len(out) == 0 || out[len(out)-1].End != n {
		out = append(out, State{End: n})
	}
	return out
}

// Subsets returns n states a volatile cache could leave, seeded by rng:
// each picks an interval between two flushes that has volatile writes, a
// moment in it, and drops a random non-empty subset of what was volatile
// then. Duplicates are left out, so fewer may come back.
func (l *Log) Subsets(rng *rand.Rand, n int) []State {
	type interval struct{ lo, hi int } // candidate ends: (lo, hi]
	var ivs []interval
	lo := 0
	for _, e := range l.Entries {
		if e.Flush() {
			ivs = append(ivs, interval{lo, e.Index})
			lo = e.Index
		}
	}
	ivs = append(ivs, interval{lo, len(l.Entries)})
	ivs = slices.DeleteFunc(ivs, func(iv interval) bool { return len(l.Volatile(iv.hi)) == 0 })
	seen := map[string]bool{}
	var out []State
	for try := 0; len(ivs) > 0 && len(out) < n && try < 4*n; try++ {
		iv := ivs[rng.IntN(len(ivs))]
		var vol []int
		end := iv.hi
		for vol == nil {
			end = iv.lo + 1 + rng.IntN(iv.hi-iv.lo)
			vol = l.Volatile(end)
		}
		drop := randomSubset(rng, vol)
		st := State{End: end, Drop: drop}
		if k := st.String(); !seen[k] {
			seen[k] = true
			out = append(out, st)
		}
	}
	return out
}

// randomSubset returns a non-empty subset of set, in order, each element
// kept with probability one half.
func randomSubset(rng *rand.Rand, set []int) []int {
	for {
		var out []int
		for _, x := range set {
			if rng.IntN(2) == 0 {
				out = append(out, x)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
}

// Thin keeps at most max of states, evenly spread, the last always kept.
func Thin(states []State, max int) []State {
	if max <= 0 || len(states) <= max {
		return states
	}
	out := make([]State, 0, max)
	for i := range max {
		out = append(out, states[(i+1)*len(states)/max-1])
	}
	return out
}

// Order sorts states by End (then by how much they drop), the order in
// which one image replayed forward serves them all.
func Order(states []State) {
	slices.SortStableFunc(states, func(a, b State) int {
		if a.End != b.End {
			return a.End - b.End
		}
		return len(a.Drop) - len(b.Drop)
	})
}

package crashcheck

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/logwrites"
)

// Knobs reads the environment's bounds for a replay and logs them:
// VOLUMED_CRASH_SEED picks the sample (default: the time),
// VOLUMED_CRASH_STATES how many states at most (default def).
func Knobs(t testing.TB, def int) (seed int64, max int) {
	t.Helper()
	seed = EnvInt(t, "VOLUMED_CRASH_SEED", time.Now().UnixNano())
	max = int(EnvInt(t, "VOLUMED_CRASH_STATES", int64(def)))
	t.Logf("crash replay: seed %d (VOLUMED_CRASH_SEED), at most %d states (VOLUMED_CRASH_STATES)", seed, max)
	return seed, max
}

// Plan picks the states to check: every flush/FUA point after entry
// from (thinned evenly if they are more than three quarters of max), then
// seeded subsets of the volatile writes for the rest, max in all.
func Plan(l *logwrites.Log, from int, seed int64, max int) []logwrites.State {
	var points []logwrites.State
	for _, s := range l.Points() {
		if s.End > from {
			points = append(points, s)
		}
	}
	points = logwrites.Thin(points, max*3/4)
	var subsets []logwrites.State
	for _, s := range l.Subsets(rand.New(rand.NewPCG(uint64(seed), 0)), max) {
		if s.End > from {
			subsets = append(subsets, s)
		}
	}
	return append(points, logwrites.Thin(subsets, max-len(points))...)
}

func Report(t testing.TB, results []Result, took time.Duration) {
	t.Helper()
	var recovered, damaged, fresh int
	for _, r := range results {
		if r.Recovered {
			recovered++
		}
		if r.Damaged != "" {
			damaged++
		}
		if len(r.Formatted) > 0 {
			fresh++
		}
		if len(r.Problems) > 0 {
			t.Errorf("state %v:\n  %s\nagent log (tail):\n%s", r.State, strings.Join(r.Problems, "\n  "), tail(r.Log, 4000))
		}
	}
	t.Logf("%d crash states checked in %s: state file damaged in %d (bbolt), recovered by the agent in %d; a blank image formatted in %d",
		len(results), took.Round(time.Second), damaged, recovered, fresh)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// EnvInt reads an integer knob from the environment, def if unset.
func EnvInt(t testing.TB, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: not an integer", name, v)
	}
	return n
}

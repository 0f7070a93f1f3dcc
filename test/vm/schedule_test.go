package vm

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/durable"
)

// handOutOrder is the order the VMs are given scenarios in: longest
// first, so that what is left for the last VM still running, when the
// others have nothing more to take, is short. How long a scenario takes
// is what it took when it last passed (took, in seconds in the VM); one
// not seen yet goes first, the longest timeout before the shorter; ties
// in name order.
func handOutOrder(ss []scenario, took map[string]float64) []scenario {
	length := func(s scenario) float64 {
		if d, ok := took[s.name]; ok {
			return d
		}
		return math.Inf(1)
	}
	out := slices.Clone(ss)
	slices.SortStableFunc(out, func(a, b scenario) int {
		return cmp.Or(cmp.Compare(length(b), length(a)), cmp.Compare(b.timeout, a.timeout), cmp.Compare(a.name, b.name))
	})
	return out
}

// queue hands the scenarios out, one at a time, to whichever VM asks
// first, and remembers which VM took which.
type queue struct {
	mu    sync.Mutex
	todo  []scenario
	taken []taken
}

type taken struct {
	name string
	vm   int
}

func newQueue(ss []scenario, took map[string]float64) *queue {
	return &queue{todo: handOutOrder(ss, took)}
}

// take gives VM vm the next scenario; false when none is left.
func (q *queue) take(vm int) (scenario, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.todo) == 0 {
		return scenario{}, false
	}
	s := q.todo[0]
	q.todo = q.todo[1:]
	q.taken = append(q.taken, taken{name: s.name, vm: vm})
	return s, true
}

// budget is the time all the scenarios may take, with reset after each.
func (q *queue) budget(reset time.Duration) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	var d time.Duration
	for _, s := range q.todo {
		d += s.timeout + reset
	}
	return d
}

// ranOn is the VM that took scenario name; false if none did.
func (q *queue) ranOn(name string) (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.IndexFunc(q.taken, func(t taken) bool { return t.name == name })
	if i < 0 {
		return 0, false
	}
	return q.taken[i].vm, true
}

// takenBy lists the scenarios VM vm took, in order.
func (q *queue) takenBy(vm int) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var names []string
	for _, t := range q.taken {
		if t.vm == vm {
			names = append(names, t.name)
		}
	}
	return names
}

// The durations file (<cache>/durations) keeps, for each scenario, the
// seconds it took in the VM when it last passed: "NAME SECONDS" lines.

// parseDurations reads a durations file's text; lines it cannot read
// are left out (the order they give is only a hint).
func parseDurations(b []byte) map[string]float64 {
	took := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if d, err := strconv.ParseFloat(f[1], 64); err == nil && d >= 0 {
			took[f[0]] = d
		}
	}
	return took
}

// formatDurations is the text of a durations file, in name order.
func formatDurations(took map[string]float64) []byte {
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(took)) {
		fmt.Fprintf(&b, "%s %.2f\n", name, took[name])
	}
	return b.Bytes()
}

// readDurations is the durations file's content; none if it is missing.
func readDurations(path string) map[string]float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return map[string]float64{}
	}
	return parseDurations(b)
}

// recordDurations adds what this run's passed scenarios took to the
// durations file, under the cache lock (runs may share the cache).
func recordDurations(cache string, passed map[string]float64) error {
	return withCacheLock(cache, func() error {
		path := durationsPath(cache)
		took := readDurations(path)
		for n, d := range passed {
			took[n] = d
		}
		return durable.WriteFile(path, formatDurations(took), 0o644)
	})
}

func durationsPath(cache string) string { return filepath.Join(cache, "durations") }

func TestHandOutOrder(t *testing.T) {
	ss := []scenario{
		{name: "a", timeout: 60 * time.Second}, {name: "b", timeout: 240 * time.Second},
		{name: "c", timeout: 90 * time.Second}, {name: "d", timeout: 240 * time.Second},
		{name: "e", timeout: 90 * time.Second},
	}
	for _, tc := range []struct {
		took map[string]float64
		want []string
	}{
		{nil, []string{"b", "d", "c", "e", "a"}}, // nothing known: by timeout, then name
		{map[string]float64{"a": 40, "b": 5, "c": 20, "d": 20, "e": 1}, []string{"a", "d", "c", "b", "e"}},
		// Unknown ones first; a tie in time goes to the longer timeout.
		{map[string]float64{"a": 40, "b": 5, "c": 5}, []string{"d", "e", "a", "b", "c"}},
	} {
		var got []string
		for _, s := range handOutOrder(ss, tc.took) {
			got = append(got, s.name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("handOutOrder(took %v) = %v, want %v", tc.took, got, tc.want)
		}
	}
	if ss[0].name != "a" {
		t.Errorf("handOutOrder reordered its argument: %v", ss)
	}
}

func TestQueue(t *testing.T) {
	q := newQueue([]scenario{{name: "short", timeout: time.Minute}, {name: "long", timeout: 3 * time.Minute}, {name: "mid", timeout: 2 * time.Minute}}, nil)
	if got := q.budget(10 * time.Second); got != 6*time.Minute+30*time.Second {
		t.Errorf("budget = %s, want 6m30s (every timeout and a reset after each)", got)
	}
	for _, step := range []struct {
		vm   int
		want string // "" for none left
	}{{0, "long"}, {1, "mid"}, {1, "short"}, {0, ""}, {1, ""}} {
		s, ok := q.take(step.vm)
		if ok != (step.want != "") || s.name != step.want {
			t.Fatalf("vm%d took %q (%v), want %q", step.vm, s.name, ok, step.want)
		}
	}
	if got := q.takenBy(1); !slices.Equal(got, []string{"mid", "short"}) {
		t.Errorf("vm1 took %v, want mid, short", got)
	}
	for name, want := range map[string]int{"long": 0, "mid": 1, "short": 1} {
		if vm, ok := q.ranOn(name); !ok || vm != want {
			t.Errorf("ranOn(%s) = %d, %v; want %d", name, vm, ok, want)
		}
	}
	if _, ok := q.ranOn("never"); ok {
		t.Error("ranOn a scenario nobody took says some VM did")
	}
}

func TestDurations(t *testing.T) {
	got := parseDurations([]byte("smoke 3.08\ncryptvol 45.70\nbroken\nneg -1\nnan x\n"))
	want := map[string]float64{"smoke": 3.08, "cryptvol": 45.7}
	if len(got) != len(want) || got["smoke"] != 3.08 || got["cryptvol"] != 45.7 {
		t.Errorf("parseDurations = %v, want %v (unreadable lines left out)", got, want)
	}
	if s := string(formatDurations(got)); s != "cryptvol 45.70\nsmoke 3.08\n" {
		t.Errorf("formatDurations = %q", s)
	}
	cache := t.TempDir()
	if err := recordDurations(cache, map[string]float64{"a": 2, "b": 3}); err != nil {
		t.Fatal(err)
	}
	if err := recordDurations(cache, map[string]float64{"b": 5}); err != nil {
		t.Fatal(err)
	}
	if got := readDurations(durationsPath(cache)); len(got) != 2 || got["a"] != 2 || got["b"] != 5 {
		t.Errorf("after two runs the file says %v, want a 2 (kept) and b 5 (the later run)", got)
	}
}

package ostest

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// vmCPU adds up what each test's qemu processes cost: the tier is bound
// by emulated CPU (two cores, every guest busy), so a test's price is its
// VMs' CPU seconds, not its wall time, which waits for slots.
type vmCPU struct {
	mu    sync.Mutex
	tests map[string]*vmCost
}

type vmCost struct {
	boots     int
	cpu, wall time.Duration
}

// add records one boot of a machine of test (a subtest counts for its
// top-level test).
func (v *vmCPU) add(test string, cpu, wall time.Duration) {
	top, _, _ := strings.Cut(test, "/")
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tests == nil {
		v.tests = map[string]*vmCost{}
	}
	c := v.tests[top]
	if c == nil {
		c = &vmCost{}
		v.tests[top] = c
	}
	c.boots++
	c.cpu += cpu
	c.wall += wall
}

// report prints each test's boots, qemu CPU and qemu wall seconds, the
// costliest first.
func (v *vmCPU) report(w io.Writer) {
	v.mu.Lock()
	defer v.mu.Unlock()
	names := make([]string, 0, len(v.tests))
	var total vmCost
	for n, c := range v.tests {
		names = append(names, n)
		total.boots += c.boots
		total.cpu += c.cpu
		total.wall += c.wall
	}
	if len(names) == 0 {
		return
	}
	slices.SortFunc(names, func(a, b string) int { return int(v.tests[b].cpu - v.tests[a].cpu) })
	fmt.Fprintf(w, "qemu CPU by test (user+system s; boots; qemu wall s):\n")
	for _, n := range names {
		c := v.tests[n]
		fmt.Fprintf(w, "  %-28s %7.1f  %3d  %7.1f\n", n, c.cpu.Seconds(), c.boots, c.wall.Seconds())
	}
	fmt.Fprintf(w, "  %-28s %7.1f  %3d  %7.1f\n", "total", total.cpu.Seconds(), total.boots, total.wall.Seconds())
}

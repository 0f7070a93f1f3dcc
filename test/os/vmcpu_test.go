package ostest

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
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

// userHZ is the unit of /proc/PID/stat's times (USER_HZ, 100 on every
// Linux architecture Go runs on).
const userHZ = 100

// CPU is how much CPU qemu has used so far: the guest's progress, which
// wall time measures only as well as the host's load lets it.
func (r *Run) CPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return statCPU(string(b))
}

// statCPU reads utime and stime from a /proc/PID/stat line. The command
// name (field 2) may hold spaces and parentheses: the fields are counted
// from its closing one.
func statCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %q: %d fields after the name", stat, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat %q: %w", stat, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// WaitCPU waits until qemu has used cpu (Run.CPU), polling; it fails t
// if qemu exits first or timeout passes.
func (r *Run) WaitCPU(t testing.TB, cpu, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		used, err := r.CPU()
		if err != nil {
			t.Fatalf("%s boot %d: qemu's CPU: %v", r.m.Name, r.n, err)
		}
		if used >= cpu {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s boot %d: qemu used %s of CPU in %s, waiting for %s", r.m.Name, r.n, used, timeout, cpu)
		}
		select {
		case <-r.exited:
			t.Fatalf("%s boot %d: qemu exited after %s of CPU, waiting for %s", r.m.Name, r.n, used, cpu)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestStatCPU(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want time.Duration
		bad  bool
	}{
		{stat: "4242 (qemu-system-x86) S 1 2 3 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 3 0", want: 1750 * time.Millisecond},
		{stat: "7 (a b) c)) R 1 2 3 0 -1 0 0 0 0 0 7 3 0 0", want: 100 * time.Millisecond},
		{stat: "7 (short) R 1 2", bad: true},
		{stat: "no name at all", bad: true},
		{stat: "7 (x) R 1 2 3 0 -1 0 0 0 0 0 lots 3 0 0", bad: true},
	} {
		got, err := statCPU(tc.stat)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("statCPU(%q) = %v, %v; want %v (error: %v)", tc.stat, got, err, tc.want, tc.bad)
		}
	}
}

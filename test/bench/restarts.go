package main

import (
	"fmt"
	"slices"
	"time"
)

// restartSample is one restart to all Ready: its wall time and the
// agent's CPU up to then.
type restartSample struct{ wall, cpu time.Duration }

// restarts stops the running agent and measures n restarts of each
// binary in bins, alternating, the
// volumes in place (-restarts N, -compare BIN): on a machine as busy as
// the shared one a single restart swings two- to fivefold, a median of
// several, each binary's next to the other's, less. Each binary is
// started once unmeasured before its measured restart: the manifests'
// saved parse belongs to the binary that saved it, and a restart of
// another binary parses every file again.
func (b *agentRun) restarts(n int, bins []string) {
	b.stop()
	samples := make([][]restartSample, len(bins))
	own := b.exe
	defer func() { b.exe = own }()
	for range n {
		for i, bin := range bins {
			b.exe = bin
			b.startAndWaitReady()
			b.stop()
			wall := b.startAndWaitReady()
			samples[i] = append(samples[i], restartSample{wall: wall, cpu: time.Duration(b.cpuNanos())})
			b.stop()
		}
	}
	for i, bin := range bins {
		wall, cpu := medianRange(samples[i], func(s restartSample) time.Duration { return s.wall }),
			medianRange(samples[i], func(s restartSample) time.Duration { return s.cpu })
		fmt.Printf("restart to all Ready, %d restarts of %s alternating: wall %s, agent CPU %s\n", n, bin, wall, cpu)
	}
	b.startAndWaitReady()
}

// medianRange renders the median of the samples' values and their range.
func medianRange(s []restartSample, of func(restartSample) time.Duration) string {
	v := make([]time.Duration, len(s))
	for i := range s {
		v[i] = of(s[i])
	}
	slices.Sort(v)
	return fmt.Sprintf("median %v (%v-%v)", v[len(v)/2].Round(time.Millisecond), v[0].Round(time.Millisecond), v[len(v)-1].Round(time.Millisecond))
}

package main

import (
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// startGCPercent is the collector's target (GOGC) from the agent's start
// until it first says READY=1. A start builds its whole state at once
// (the state file, the manifests' saved parse, every volume's record and
// probe), nearly all of it live: at the default 100 the heap doubled
// from 4 MiB several times over, each a collection of a heap that was
// all still in use, and a restart at 1000 volumes spent 20–30 % less
// CPU at 400 (docs/performance.md). The heap it grew is handed back at
// the first settle (debug.FreeOSMemory, after READY=1), so RSS at Ready
// stays as it was.
const startGCPercent = 400

// startGC is the target a start runs with, given the one in force:
// raised to startGCPercent, unless the collector is off or set higher
// already (GOGC in the unit's environment).
func startGC(current int) int {
	if current < 0 || current >= startGCPercent {
		return current
	}
	return startGCPercent
}

// startGCWindow bounds the start's target for an agent that does not
// settle (a volume's operation hung in the kernel): its heap is not left
// to grow to four times what is live for good.
const startGCWindow = time.Minute

// raiseGCForStart sets the start's target and returns what puts the one
// in force before back, once however often it is called, and at the
// latest after startGCWindow.
func raiseGCForStart() func() {
	prev := debug.SetGCPercent(startGCPercent)
	if want := startGC(prev); want != startGCPercent {
		debug.SetGCPercent(want)
	}
	var once sync.Once
	put := func() { once.Do(func() { debug.SetGCPercent(prev) }) }
	late := time.AfterFunc(startGCWindow, put)
	return func() { late.Stop(); put() }
}

// atReady calls restore when the agent first says READY=1, before
// passing the line on.
func atReady(notify func(string), restore func()) func(string) {
	return func(state string) {
		if strings.HasPrefix(state, "READY=1") {
			restore()
		}
		notify(state)
	}
}

package main

import (
	"runtime/debug"
	"testing"
)

func TestStartGC(t *testing.T) {
	for _, c := range []struct{ current, want int }{
		{100, startGCPercent}, // the default: raised
		{50, startGCPercent},
		{-1, -1},   // GOGC=off stays off
		{800, 800}, // set higher already: kept
		{startGCPercent, startGCPercent},
	} {
		if got := startGC(c.current); got != c.want {
			t.Errorf("startGC(%d) = %d, want %d", c.current, got, c.want)
		}
	}
}

// The start's target holds until the first READY=1, which puts back the
// one in force before; later lines change nothing.
func TestGCRestoredAtReady(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	var lines []string
	notify := atReady(func(s string) { lines = append(lines, s) }, raiseGCForStart())
	notify("STATUS=1 attaching")
	if got := debug.SetGCPercent(startGCPercent); got != startGCPercent {
		t.Errorf("GC percent before READY=1 = %d, want %d", got, startGCPercent)
	}
	notify("READY=1\nSTATUS=1 ready")
	if got := debug.SetGCPercent(70); got != 100 {
		t.Errorf("GC percent after READY=1 = %d, want 100 (as before the start)", got)
	}
	notify("READY=1\nSTATUS=1 ready")
	if got := debug.SetGCPercent(100); got != 70 {
		t.Errorf("a second READY=1 set the GC percent again (%d)", got)
	}
	if len(lines) != 3 {
		t.Errorf("lines passed on: %q", lines)
	}
}

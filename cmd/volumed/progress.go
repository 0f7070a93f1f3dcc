package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// waitProgress tells a person (or a unit's journal) what `volumed wait` is
// waiting for, so a slow or stuck volume is never a silent pause. On a
// terminal it keeps one live line; elsewhere it writes a line each time
// the reasons change. Nothing is written in the first second, so a wait
// that is over at once stays quiet.
type waitProgress struct {
	w     io.Writer
	tty   bool
	start time.Time
	grace time.Duration
	last  string
	live  bool // a live line is on the terminal
}

func newWaitProgress(w io.Writer, now time.Time) *waitProgress {
	return &waitProgress{w: w, tty: isTerminal(w), start: now, grace: time.Second}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// show reports why the wait goes on at now.
func (p *waitProgress) show(why []string, now time.Time) {
	elapsed := now.Sub(p.start)
	if elapsed < p.grace || len(why) == 0 {
		return
	}
	text := strings.Join(why, "; ")
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Kwaiting %s: %s", elapsed.Truncate(time.Second), text)
		p.live = true
		return
	}
	if text == p.last {
		return
	}
	p.last = text
	fmt.Fprintf(p.w, "waiting (%s): %s\n", elapsed.Truncate(100*time.Millisecond), text)
}

// done ends the live line, so what follows starts on a line of its own.
func (p *waitProgress) done() {
	if p.live {
		fmt.Fprint(p.w, "\r\033[K")
		p.live = false
	}
}

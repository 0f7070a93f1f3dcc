package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestWaitProgressLines: off a terminal, wait writes a line each time what
// it waits for changes, and nothing in its first second.
func TestWaitProgressLines(t *testing.T) {
	var buf bytes.Buffer
	t0 := time.Unix(1000, 0)
	p := newWaitProgress(&buf, t0)
	p.show([]string{"logs: Pending"}, t0.Add(500*time.Millisecond))
	if buf.Len() > 0 {
		t.Fatalf("wrote %q within the first second", buf.String())
	}
	for i, why := range [][]string{
		{"logs: Attaching"},
		{"logs: Attaching"},
		{"logs: Attaching"},
		{"logs: Failed (mkfs.xfs: executable file not found; 2 retries)"},
		{"logs: Failed (mkfs.xfs: executable file not found; 2 retries)"},
	} {
		p.show(why, t0.Add(time.Second+time.Duration(i)*time.Second))
	}
	p.done()
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []string{
		"waiting (1s): logs: Attaching",
		"waiting (4s): logs: Failed (mkfs.xfs: executable file not found; 2 retries)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("progress:\n%s\nwant:\n%s", buf.String(), strings.Join(want, "\n"))
	}
}

func TestWaitProgressLiveLine(t *testing.T) {
	var buf bytes.Buffer
	t0 := time.Unix(1000, 0)
	p := newWaitProgress(&buf, t0)
	p.tty = true
	p.show([]string{"web: Formatting"}, t0.Add(2*time.Second))
	p.show([]string{"web: Formatting"}, t0.Add(3*time.Second))
	p.done()
	want := "\r\033[Kwaiting 2s: web: Formatting\r\033[Kwaiting 3s: web: Formatting\r\033[K"
	if buf.String() != want {
		t.Fatalf("live line %q, want %q", buf.String(), want)
	}
}

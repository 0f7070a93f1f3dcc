package main

import (
	"context"
	"testing"

	"github.com/volumed/volumed/agent"
)

// Wakes dropped on a full queue are made good by one rescan, queued once
// there is room: the event of the disk a volume waits for may be among
// them. (Before waits were stated every queued wake retried every waiting
// volume, and a drop cost nothing.)
func TestDroppedWakesBringARescan(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := newWakeQueue(ctx, 1, agent.Wake{Reason: "rescan"})
	for _, r := range []string{"a", "b: dropped", "c: dropped"} {
		q.send(agent.Wake{Reason: r})
	}
	for _, want := range []string{"a", "rescan"} {
		if w := <-q.c; w.Reason != want {
			t.Fatalf("wake %q, want %q", w.Reason, want)
		}
	}
	// One rescan for the run of drops: the next wake comes as it is.
	q.send(agent.Wake{Reason: "d"})
	if w := <-q.c; w.Reason != "d" {
		t.Fatalf("wake %q, want d", w.Reason)
	}
	// Drops after a rescan went bring another.
	q.send(agent.Wake{Reason: "e"})
	q.send(agent.Wake{Reason: "f: dropped"})
	for _, want := range []string{"e", "rescan"} {
		if w := <-q.c; w.Reason != want {
			t.Fatalf("wake %q, want %q", w.Reason, want)
		}
	}
}

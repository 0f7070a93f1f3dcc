package main

import (
	"context"
	"sync/atomic"

	"github.com/volumed/volumed/agent"
)

// wakeQueue hands the watchers' wakes to the agent without ever
// blocking a watcher. A wake that finds the queue full is dropped, and
// what it was about with it: a waiting volume retries only at the event
// of what it waits for (decide.Concerns), so that event may be the one
// dropped. Each drop is therefore made good by a rescan wake (every
// waiting volume retried, as each queued wake did before waits were
// stated), sent once there is room, from a goroutine of its own that
// ends with ctx; drops while one is pending share it.
type wakeQueue struct {
	ctx    context.Context
	c      chan agent.Wake
	rescan agent.Wake
	// lost: a wake was dropped since the last rescan was queued;
	// sending: the rescan's goroutine runs.
	lost, sending atomic.Bool
}

func newWakeQueue(ctx context.Context, size int, rescan agent.Wake) *wakeQueue {
	return &wakeQueue{ctx: ctx, c: make(chan agent.Wake, size), rescan: rescan}
}

// send queues w, or drops it and has a rescan follow.
func (q *wakeQueue) send(w agent.Wake) {
	select {
	case q.c <- w:
		return
	default:
	}
	q.lost.Store(true)
	if q.sending.CompareAndSwap(false, true) {
		go q.sendRescans()
	}
}

// sendRescans queues a rescan for every run of drops, until none is
// left: a drop after the last check starts it again.
func (q *wakeQueue) sendRescans() {
	for {
		for q.lost.Swap(false) {
			select {
			case q.c <- q.rescan:
			case <-q.ctx.Done():
				q.sending.Store(false)
				return
			}
		}
		q.sending.Store(false)
		if !q.lost.Load() || !q.sending.CompareAndSwap(false, true) {
			return
		}
	}
}

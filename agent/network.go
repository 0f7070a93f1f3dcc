// shutdown --network: network volumes torn down and held before the network goes

package agent

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/volumed/volumed/agent/api"
)

// networkHold: `volumed shutdown --network` was asked; the network
// volumes are torn down and stay down until the agent exits (or
// ResumeNetwork).
type networkHold struct {
	drivers []string // the drivers whose volumes need the network

	mu   sync.Mutex
	held bool
}

// set holds or lets go and returns what it was.
func (h *networkHold) set(on bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.held
	h.held = on
	return was
}

func (h *networkHold) on() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// network: the driver's volumes need the network.
func (h *networkHold) network(kind string) bool { return slices.Contains(h.drivers, kind) }

// apply returns desired as the passes must see it: while held, every
// network volume is wanted absent. desired itself is not changed.
func (h *networkHold) apply(desired map[string]*Desired) map[string]*Desired {
	if !h.on() {
		return desired
	}
	held := make(map[string]*Desired, len(desired))
	for n, d := range desired {
		if h.network(d.Kind) && !d.Absent {
			c := *d
			c.Absent = true
			d = &c
		}
		held[n] = d
	}
	return held
}

// ShutdownNetwork tears down every network volume that is not pinned
// and keeps them down until the agent exits: at poweroff they must be
// gone before the network is. It returns when they are down or ctx ends.
func (a *Agent) ShutdownNetwork(ctx context.Context) api.ShutdownReply {
	// What is down can only be told once the actual state is known; at
	// poweroff the caller would rather wait than be told "none".
	select {
	case <-a.startedc:
	case <-ctx.Done():
		return api.ShutdownReply{Down: []string{}, Pinned: []string{}, Remaining: []string{errStarting}}
	}
	if first := !a.hold.set(true); first {
		a.cfg.Log.Info("shutdown --network: tearing down network volumes and keeping them down")
		a.dirty.markAll() // every network volume is wanted absent now
	}
	a.Trigger()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		r, done := a.networkDown()
		if done {
			return r
		}
		select {
		case <-ctx.Done():
			return r
		case <-tick.C:
		}
	}
}

// ResumeNetwork undoes ShutdownNetwork: network volumes are set up
// again (the network unit started again after a manual stop).
func (a *Agent) ResumeNetwork() {
	if was := a.hold.set(false); was {
		a.cfg.Log.Info("resume --network: network volumes are set up again")
		a.dirty.markAll()
		for n, d := range a.desiredSnapshot() {
			if a.hold.network(d.Kind) {
				a.exec.Reset(n)
			}
		}
	}
	a.Trigger()
}

// networkDown reports which network volumes are down and whether all are.
func (a *Agent) networkDown() (api.ShutdownReply, bool) {
	r := api.ShutdownReply{Down: []string{}, Remaining: []string{}, Pinned: []string{}}
	actual := a.state.Snapshot()
	// Every network volume wanted or still held: a pinned one whose
	// manifest is gone is held still.
	names := map[string]bool{}
	for n, d := range a.desiredSnapshot() {
		if a.hold.network(d.Kind) {
			names[n] = true
		}
	}
	for n, rec := range actual {
		if a.hold.network(rec.Kind) {
			names[n] = true
		}
	}
	for n := range names {
		rec := actual[n]
		switch {
		case rec != nil && rec.Attachment != nil && rec.Attachment.Pinned:
			r.Pinned = append(r.Pinned, n)
		case rec != nil && (rec.Attachment != nil || rec.Staging != nil || len(rec.Targets) > 0):
			msg := n
			if f, ok := a.exec.LastFailure(n); ok {
				msg += ": " + f.Op + ": " + f.Err.Error()
			}
			r.Remaining = append(r.Remaining, msg)
		default:
			r.Down = append(r.Down, n)
		}
	}
	sort.Strings(r.Down)
	sort.Strings(r.Remaining)
	sort.Strings(r.Pinned)
	settled := a.exec.Busy() == 0
	return r, len(r.Remaining) == 0 && settled
}

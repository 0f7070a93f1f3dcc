package agent

import (
	"context"
	"time"
)

// petting is systemd's watchdog as the reconcile loop pets it: at each
// tick while the loop waits for work, and while it waits on a step that
// runs programs (lvm2's reports at a growth or drift check, a rescan),
// so that a program slowed by a busy host does not read as a stuck
// loop: systemd killed the agent in the middle of a CSI call when a
// drift check's lvm2 reports took longer than WatchdogSec under
// emulation (TestLVMThin, docs/performance.md). A step is bounded as an
// operation is (--op-timeout): its programs are killed at that bound,
// and a step still not back after it has stopped petting, so a loop
// truly stuck is restarted. The zero value pets nothing.
type petting struct {
	tick   <-chan time.Time // nil: no watchdog
	notify func(string)
}

// pet tells systemd the loop is alive.
func (p petting) pet() {
	if p.tick != nil {
		p.notify("WATCHDOG=1")
	}
}

// await runs step, which reads the host through programs, on a
// goroutine of its own and waits for it, petting the watchdog at each
// tick until step's bound (--op-timeout; none at 0) has passed. It
// returns when step has: nothing of step runs on after it.
func (a *Agent) await(ctx context.Context, step func(context.Context)) {
	if a.cfg.OpTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.OpTimeout)
		defer cancel()
	}
	if a.watchdog.tick == nil {
		step(ctx)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		step(ctx)
	}()
	for {
		select {
		case <-done:
			return
		case <-a.watchdog.tick:
			if ctx.Err() == nil {
				a.watchdog.pet()
			}
		}
	}
}

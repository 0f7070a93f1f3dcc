// The reconcile loop: each pass observes, decides (pure), then acts
// through the executor.

package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/internal/readonce"
	"github.com/volumed/volumed/store"
)

// manifestSettle is how long the manifest directories must stay quiet
// before they are read again: long enough that a burst of changes (a
// package's files, an editor's write and rename) is read once, short
// enough not to show in how fast a change takes effect (docs/performance.md
// has what was measured). A file read half-written is almost always
// refused as a whole, its last good state kept, and read again at its
// next write; a change that must never be seen half done is written
// aside and renamed in, as in any drop-in directory, whatever the settle
// time. docs/architecture.md states this value (a test checks it).
const manifestSettle = 20 * time.Millisecond

// maxNamed bounds the paths a burst of manifest events keeps for the
// next read; past it the read is a full Load.
const maxNamed = 4096

// Run reconstructs the actual state from the store and the kernel, then
// reconciles until ctx is cancelled. On return every mount is left in
// place: stopping the agent never tears anything down.
func (a *Agent) Run(ctx context.Context) error {
	watcher, err := a.start(ctx)
	if watcher != nil {
		defer watcher.Close()
	}
	if err != nil {
		return err
	}
	go a.settleLoop(ctx)

	// Operations get a context of their own so that SIGTERM lets them
	// finish (within the grace period) instead of cutting a mkfs short.
	opCtx, cancelOps := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelOps()

	var watchEvents <-chan fsnotify.Event
	var watchErrors <-chan error
	if watcher != nil {
		watchEvents, watchErrors = watcher.Events, watcher.Errors
	}

	resync := time.NewTicker(a.cfg.Resync)
	defer resync.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	if a.cfg.WatchdogInterval > 0 {
		t := time.NewTicker(a.cfg.WatchdogInterval)
		defer t.Stop()
		a.watchdog = petting{tick: t.C, notify: a.notify}
		a.watchdog.pet()
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var named []string // what the watch named since the last read
	overflowed := false

	for {
		a.pass(opCtx)
		retry.Stop()
		if t := a.exec.NextRetry(); !t.IsZero() {
			retry.Reset(max(t.Sub(a.cfg.Now()), time.Millisecond))
		}
		// A kernel event about nothing of ours goes back to waiting
		// without a pass: a host with busy disks pays nothing for them.
		for idle := true; idle; {
			idle = false
			select {
			case <-ctx.Done():
				return a.shutdown(cancelOps)
			case <-a.trigger:
			case <-retry.C:
			case <-resync.C:
				a.await(ctx, func(ctx context.Context) { a.resync(ctx, watcher) })
			case w := <-a.cfg.Wake:
				a.await(ctx, func(ctx context.Context) { idle = !a.wake(ctx, w) })
			case <-a.watchdog.tick:
				a.watchdog.pet()
				idle = true
			case <-a.reload:
				a.loadManifests()
				a.notify("READY=1")
			case ev := <-watchEvents:
				a.cfg.Log.Debug("manifest change", "path", ev.Name, "op", ev.Op.String())
				if len(named) < maxNamed {
					named = append(named, ev.Name)
				} else {
					named = nil // more than a read of them all: Load
					overflowed = true
				}
				debounce.Reset(manifestSettle)
				idle = true // the debounce timer brings the pass
			case err := <-watchErrors:
				// An overflow loses events: read everything again.
				a.cfg.Log.Warn("manifest watch", "error", err)
				a.loadManifests()
			case <-debounce.C:
				if overflowed {
					a.loadManifests()
				} else {
					a.loadChangedManifests(named)
				}
				named, overflowed = nil, false
			}
		}
	}
}

// start reads the manifests and reconstructs the actual state; the
// manifests are watched before the first read, so that an edit made
// while the agent starts is never missed.
func (a *Agent) start(ctx context.Context) (*fsnotify.Watcher, error) {
	// Whatever an agent that was killed left says nothing of the volumes
	// now: each is marked again once a pass finds it usable.
	if err := a.ready.reset(); err != nil {
		return nil, err
	}
	watcher := a.watch()
	// One look at the host: a driver's report (lvm2's vgs, lvs) is read
	// once for the kernel's read and every volume's probe.
	ctx = readonce.Open(ctx)
	start := a.cfg.Now()
	kernel := a.readKernelAside(ctx)
	a.loadManifests()
	loaded := a.cfg.Now()
	if err := a.reconstructFrom(ctx, <-kernel); err != nil {
		return watcher, fmt.Errorf("reconstruct actual state: %w", err)
	}
	close(a.startedc)
	a.cfg.Log.Info("actual state reconstructed", "volumes", len(a.state.Snapshot()),
		"manifests", loaded.Sub(start), "reconstruct", a.cfg.Now().Sub(loaded))
	return watcher, nil
}

// resync is the periodic look at everything: the manifests read again,
// the records checked against the kernel, sizes and usage refreshed.
func (a *Agent) resync(ctx context.Context, watcher *fsnotify.Watcher) {
	a.dirty.markAll() // the safety net: every volume planned again
	a.loadManifests()
	a.verify(ctx)
	a.refreshSizes(ctx)
	a.askGrowthCheck()
	a.addWatches(watcher)
	a.refreshUsage()
}

func (a *Agent) shutdown(cancelOps context.CancelFunc) error {
	a.notify("STOPPING=1")
	// With no agent to answer, volumed wait would not call a volume
	// ready: neither does a mark.
	if err := a.ready.reset(); err != nil {
		a.cfg.Log.Error("ready marks left in place", "error", err)
	}
	done := make(chan struct{})
	go func() { a.exec.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(a.cfg.ShutdownGrace):
		// Abandoning is safe: every running operation has a durable
		// intent that the next start resolves by probing the kernel.
		a.cfg.Log.Warn("operations still running at shutdown; abandoning them", "grace", a.cfg.ShutdownGrace)
		cancelOps()
		select {
		case <-done:
		case <-time.After(abandonWait):
			// Stuck where a context does not reach: a write to a frozen
			// or hung state filesystem. Its intent is durable or it never
			// started, so the next start resolves it.
			a.cfg.Log.Warn("operations stuck in the kernel; not waiting for them", "waiting", a.stuckOn())
		}
	}
	a.cfg.Log.Info("stopped; every mount stays in place")
	return nil
}

// pass is one reconcile pass: observe, then decide (decide.Decide, pure), then
// act (the executor starts what is not already running or backing off).
// It plans again only the volumes marked (dirtySet) and those whose step
// reads what they changed (decide.Planner); the first pass and the
// resync plan every volume.
func (a *Agent) pass(ctx context.Context) {
	start := a.cfg.Now()
	p := a.plan(ctx, start)
	desired, actual := p.desired, a.view.actual
	started := a.act(ctx, p.dec, desired, actual, a.view.versions)
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.reconcile.Observe(a.cfg.Now().Sub(start).Seconds())
	}
	a.forgetGone(p.planned, desired, actual)
	converged := started == 0 && a.exec.Busy() == 0
	if converged {
		// No intent is coming to carry the last outcomes to disk.
		a.cfg.Store.Flush()
	}
	settled := settledForReady(converged, a.systemd.hasSettled(), a.exec.RunningVolumes(), func(v string) bool {
		d := desired[v]
		return d != nil && a.hold.network(d.Kind)
	})
	a.settled.add(p.all, p.planned)
	a.syncReadyMarks(p, desired)
	first, report := a.systemd.passDone(settled, a.cfg.Now())
	defer a.waiters.passDone()
	var all bool
	var touched []string
	if first {
		all, touched = a.settled.take()
		if all {
			a.refreshUsage()
		} else {
			a.refreshUsageOf(touched)
		}
	}
	if report {
		a.reportStatus(first, desired)
	}
	if first && releaseHeapAfter(all, len(touched)) {
		// The heap a burst of operations grew stays with the runtime,
		// which hands it back to the kernel only slowly (docs/performance.md).
		// Once per settling, after systemd has been told.
		debug.FreeOSMemory()
	}
}

// passPlan is what a pass decided: from which desired state, for which
// volumes (planned: those planned again; the records are a.view's).
type passPlan struct {
	desired map[string]*Desired
	all     bool // every volume planned
	planned []string
	dec     decide.Decision
}

// plan is a pass up to its decision: what is marked is read again and
// planned again, and the pending changes of those volumes said.
func (a *Agent) plan(ctx context.Context, now time.Time) passPlan {
	for _, n := range a.exec.BackoffsEnded(a.backoffsSeen, now) {
		a.dirty.mark(n)
	}
	a.backoffsSeen = now
	// Taken before the desired state and the records are read: a change
	// after marks again, for the next pass.
	all, names := a.dirty.take()
	desired := a.desiredSnapshot()
	planned := a.view.refresh(a.state, desired, all, names)
	obs := a.observe(ctx, desired, a.view.actual)
	dec := a.view.planner.Decide(desired, a.view.actual, obs, planned)
	a.updatePending(desired, planned, dec.Pending)
	return passPlan{desired: desired, all: all, planned: planned, dec: dec}
}

// act carries a decision out: each operation goes to the executor, which
// runs it under the volume's intent unless one is running or backing off,
// or the volume's record changed since the snapshot the plan was made
// from (versions): an operation that finished meanwhile would otherwise
// be run again (a second mount_device, which adopts its own mount and
// then remounts it), at the cost of an intent and its fsync.
func (a *Agent) act(ctx context.Context, dec decide.Decision, desired map[string]*Desired, actual map[string]*store.Volume, versions map[string]uint64) int {
	for _, n := range dec.GrowSettled {
		// Nothing to grow (the size asked for was lowered back): a
		// failure of an earlier grow no longer matters.
		a.apply(n, CondGrowFailed, nil, nil)
	}
	for _, sh := range dec.ShrinkRefused {
		a.shrinkRefused(sh)
	}
	started := 0
	for _, op := range dec.Ops {
		fn := a.opFunc(op, desired[op.Volume], actual[op.Volume])
		kind := kindOf(desired[op.Volume], actual[op.Volume])
		current := func() bool {
			if a.state.Version(op.Volume) == versions[op.Volume] {
				return true
			}
			// Not converged: the next pass plans this volume again
			// (the change to its record marked it).
			started++
			a.Trigger()
			return false
		}
		ok, _ := a.exec.StartIf(ctx, op.Volume, op.Name, current, func(ctx context.Context) error {
			err := a.run(ctx, op.Volume, kind, op.Name, fn)
			if errors.Is(err, errRetryNow) {
				return nil
			}
			return err
		}, func(error) { a.dirty.mark(op.Volume); a.Trigger() })
		if ok {
			started++
		}
	}
	return started
}

// forgetGone: a volume gone from both manifests and kernel starts afresh
// if it comes back: its history and failures go with it. Of the volumes
// planned: one goes by a change that marks it, or by the end of its
// operation, which marks it too.
func (a *Agent) forgetGone(names []string, desired map[string]*Desired, actual map[string]*store.Volume) {
	unrecorded := a.state.Unrecorded()
	for _, name := range names {
		if desired[name] != nil || actual[name] != nil || slices.Contains(unrecorded, name) || !a.history.has(name) {
			continue
		}
		if _, busy := a.exec.Running(name); !busy {
			a.history.forget(name)
			a.waits.forget(name)
			a.formats.forgetRefused(name)
			a.conds.Forget(name)
		}
	}
}

func kindOf(d *Desired, rec *store.Volume) string {
	if d != nil {
		return d.Kind
	}
	if rec != nil {
		return rec.Kind
	}
	return ""
}

func (a *Agent) opFunc(op Op, d *Desired, rec *store.Volume) func(context.Context) error {
	kind := kindOf(d, rec)
	switch op.Name {
	case OpAttach:
		return func(ctx context.Context) error { return a.opAttach(ctx, d) }
	case OpOpen:
		return func(ctx context.Context) error { return a.opOpen(ctx, d) }
	case OpMountDevice:
		return func(ctx context.Context) error { return a.opMountDevice(ctx, d) }
	case OpPublish:
		return func(context.Context) error { return a.opPublish(d, op.Target) }
	case OpUnpublish:
		return func(ctx context.Context) error { return a.opUnpublish(ctx, op.Volume, kind, op.Target.Path) }
	case OpUnmountDevice:
		return func(ctx context.Context) error { return a.opUnmountDevice(ctx, op.Volume, kind) }
	case OpClose:
		return func(ctx context.Context) error { return a.opClose(ctx, op.Volume, kind) }
	case OpDetach:
		return func(ctx context.Context) error {
			err := a.opDetach(ctx, op.Volume, kind)
			if err == nil {
				a.forgetIdentityIfGone(op.Volume)
			}
			return err
		}
	case OpGrow:
		return func(ctx context.Context) error { return a.opGrow(ctx, d) }
	case OpRemount:
		return func(context.Context) error { return a.opRemount(d, op.Target) }
	}
	return func(context.Context) error { return fmt.Errorf("unknown operation %q", op.Name) }
}

// run logs, measures and records one operation.
func (a *Agent) run(ctx context.Context, volume, kind, op string, fn func(context.Context) error) error {
	start := a.cfg.Now()
	a.cfg.Log.Info("operation started", "volume", volume, "operation", op, "driver", kind)
	err := a.withoutReadyMark(ctx, volume, op, fn)
	d := a.cfg.Now().Sub(start)
	if errors.Is(err, errRetryNow) {
		a.cfg.Log.Info("operation found the record stale; replanning", "volume", volume, "operation", op, "driver", kind)
		return err
	}
	ev := api.Event{Time: start, Op: op, Result: "success", Duration: d.Seconds()}
	if err != nil {
		ev.Result, ev.Error = "error", err.Error()
		a.cfg.Log.Error("operation failed", "volume", volume, "operation", op, "driver", kind, "duration", d, "error", err)
	} else {
		a.cfg.Log.Info("operation finished", "volume", volume, "operation", op, "driver", kind, "duration", d)
	}
	a.cfg.Metrics.observeOp(op, kind, d, err)
	a.history.add(volume, ev)
	return err
}

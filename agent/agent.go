// Package agent is volumed's core: desired state from the manifests,
// actual state behind a durable store, the reconciler that compares them
// and the executor that acts through the drivers' interfaces.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/store"
)

// Config wires an agent. cmd/volumed fills it with the concrete drivers.
type Config struct {
	StateDir  string
	Manifests Manifests
	// WatchDirs are watched for manifest changes (the drop-in dirs).
	WatchDirs []string
	Store     Store
	Attachers map[string]Attacher
	FS        Filesystems
	Mounter   Mounter
	Log       *slog.Logger
	Metrics   *Metrics
	// Resync is the period of the drift check and manifest re-read.
	Resync time.Duration
	// Parallel bounds the operations running at once.
	Parallel int
	Now      func() time.Time
	// Notify receives sd_notify lines (READY=1, STATUS=...); may be nil.
	Notify func(state string)
	// StateRecovery, when set, says the state file was damaged and moved aside.
	StateRecovery string
	// WatchdogInterval, when set, is how often the reconcile loop pets
	// systemd's watchdog (WATCHDOG=1): a wedged loop stops petting.
	WatchdogInterval time.Duration
	// ShutdownGrace is how long SIGTERM waits for running operations.
	ShutdownGrace time.Duration
	// Wake delivers kernel events (a block device came or went, a link
	// came up) that make waiting volumes worth retrying now.
	Wake <-chan Wake
	// NetworkDrivers are the drivers whose volumes need the network;
	// `volumed shutdown --network` tears them down.
	NetworkDrivers []string
	// Host and BootVolumes are shown in the status.
	Host        api.HostIdentity
	BootVolumes []api.BootVolume
}

// Wake is a kernel event worth a reconcile pass.
type Wake struct {
	Reason string
	// Drivers: volumes of these drivers that are not converged retry at
	// once instead of at the end of their backoff.
	Drivers []string
	// Verify: something may have gone (a device removed): check for drift.
	Verify bool
	// Grow: a device may have changed size.
	Grow bool
	// Device, when set, is the kernel name ("sdb") of the one device the
	// event is about: Verify and Grow then concern only a volume on it,
	// so the events of devices that are not ours cost nothing.
	Device string
}

// Agent is one running volumed.
type Agent struct {
	cfg Config
	// sessions are the shared kernel objects volumed made.
	sessions *ownedSessions
	// state is set once by reconstruct, on Run's goroutine, before
	// startedc is closed; other goroutines (the API, the metrics) read it
	// only once started() reports it set.
	state    *State
	startedc chan struct{}
	exec     *Executor
	usage    *usageCache
	conds    *conditions

	trigger chan struct{}
	reload  chan struct{}

	mu       sync.Mutex
	desired  map[string]*Desired
	problems []string
	events   map[string][]api.Event
	// interruptedFormats: volumes whose format a crash left uncertain,
	// with the filesystem UUID that format was making.
	interruptedFormats map[string]string
	refusedFormats     map[string]refusedFormat
	settled            bool
	statusLine         string
	// checkGrowth asks the next pass to compare sizes (resync, device
	// events, manifest changes); passes in between skip the reads.
	checkGrowth bool
	growDevices map[string]bool
	lastReport  time.Time
	// holdNetwork: `volumed shutdown --network` was asked; network
	// volumes are torn down and stay down until the agent exits.
	holdNetwork bool
}

const eventsKept = 20

// New returns an agent; Run starts it.
func New(cfg Config) *Agent {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Resync <= 0 {
		cfg.Resync = time.Minute
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 16
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 20 * time.Second
	}
	a := &Agent{
		cfg:                cfg,
		exec:               NewExecutor(cfg.Parallel, cfg.Now),
		usage:              newUsageCache(),
		conds:              newConditions(cfg.Now),
		trigger:            make(chan struct{}, 1),
		reload:             make(chan struct{}, 1),
		startedc:           make(chan struct{}),
		desired:            map[string]*Desired{},
		events:             map[string][]api.Event{},
		interruptedFormats: map[string]string{},
		refusedFormats:     map[string]refusedFormat{},
		sessions:           newOwnedSessions(),
	}
	if cfg.Metrics != nil {
		cfg.Metrics.Registry.MustRegister(&volumeCollector{a: a})
	}
	return a
}

// Trigger asks for a reconcile pass as soon as possible.
func (a *Agent) Trigger() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// started reports whether the actual state is reconstructed: before,
// there is no state to show or act on.
func (a *Agent) started() bool {
	select {
	case <-a.startedc:
		return true
	default:
		return false
	}
}

// Reload asks for the manifests to be read again at once (SIGHUP).
func (a *Agent) Reload() {
	select {
	case a.reload <- struct{}{}:
	default:
	}
}

// Run reconstructs the actual state from the store and the kernel, then
// reconciles until ctx is cancelled. On return every mount is left in
// place: stopping the agent never tears anything down.
func (a *Agent) Run(ctx context.Context) error {
	// Watch before the first read, so that an edit made while the agent
	// starts is never missed.
	watcher := a.watch()
	if watcher != nil {
		defer watcher.Close()
	}
	start := a.cfg.Now()
	a.loadManifests()
	loaded := a.cfg.Now()
	if err := a.reconstruct(ctx); err != nil {
		return fmt.Errorf("reconstruct actual state: %w", err)
	}
	close(a.startedc)
	a.cfg.Log.Info("actual state reconstructed", "volumes", len(a.state.Snapshot()),
		"manifests", loaded.Sub(start), "reconstruct", a.cfg.Now().Sub(loaded))

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
	var watchdog <-chan time.Time
	if a.cfg.WatchdogInterval > 0 {
		t := time.NewTicker(a.cfg.WatchdogInterval)
		defer t.Stop()
		watchdog = t.C
		a.notify("WATCHDOG=1")
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()

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
				a.loadManifests()
				a.verify(ctx)
				a.refreshSizes(ctx)
				a.askGrowthCheck()
				a.addWatches(watcher)
				a.refreshUsage()
			case w := <-a.cfg.Wake:
				idle = !a.wake(ctx, w)
			case <-watchdog:
				a.notify("WATCHDOG=1")
				idle = true
			case <-a.reload:
				a.loadManifests()
				a.notify("READY=1")
			case ev := <-watchEvents:
				a.cfg.Log.Debug("manifest change", "path", ev.Name, "op", ev.Op.String())
				debounce.Reset(100 * time.Millisecond)
				idle = true // the debounce timer brings the pass
			case err := <-watchErrors:
				// An overflow loses events: read everything again.
				a.cfg.Log.Warn("manifest watch", "error", err)
				a.loadManifests()
			case <-debounce.C:
				a.loadManifests()
			}
		}
	}
}

func (a *Agent) shutdown(cancelOps context.CancelFunc) error {
	a.notify("STOPPING=1")
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

// loadManifests re-reads the manifests and replaces the desired state.
// A volume whose manifest changed gets a fresh backoff.
func (a *Agent) loadManifests() {
	res := a.cfg.Manifests.Load()
	desired := buildDesired(res)
	problems := make([]string, 0, len(res.Problems))
	for _, p := range res.Problems {
		problems = append(problems, p.Error())
	}
	a.mu.Lock()
	old := a.desired
	a.desired = desired
	oldProblems := a.problems
	a.problems = problems
	a.mu.Unlock()

	for name, d := range desired {
		if o := old[name]; o == nil || o.Generation != d.Generation {
			a.exec.Reset(name)
			a.askGrowthCheck()
			if o != nil {
				a.cfg.Log.Info("manifest changed", "volume", name, "file", d.File)
			}
		}
	}
	for name := range old {
		if desired[name] == nil {
			a.exec.Reset(name)
			a.cfg.Log.Info("manifest removed", "volume", name)
		}
	}
	if !slices.Equal(oldProblems, problems) {
		for _, p := range problems {
			a.cfg.Log.Error("manifest refused", "problem", p)
		}
	}
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.manifestErrors.Set(float64(len(res.BadFiles)))
	}
	a.Trigger()
}

func (a *Agent) desiredSnapshot() map[string]*Desired {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.holdNetwork {
		return a.desired
	}
	held := make(map[string]*Desired, len(a.desired))
	for n, d := range a.desired {
		if slices.Contains(a.cfg.NetworkDrivers, d.Driver) && !d.Absent {
			c := *d
			c.Absent = true
			d = &c
		}
		held[n] = d
	}
	return held
}

// pass is one reconcile pass: decide, then dispatch what is not already
// running or backing off.
func (a *Agent) pass(ctx context.Context) {
	start := a.cfg.Now()
	desired := a.desiredSnapshot()
	actual := a.state.Snapshot()
	started := 0
	ops := Plan(desired, actual)
	ops = append(ops, a.growthOps(desired, actual, ops)...)
	a.updatePending(desired, actual)
	for _, op := range ops {
		fn := a.opFunc(op, desired[op.Volume], actual[op.Volume])
		driver := driverOf(desired[op.Volume], actual[op.Volume])
		ok, _ := a.exec.Start(ctx, op.Volume, op.Kind, func(ctx context.Context) error {
			err := a.run(ctx, op.Volume, driver, op.Kind, fn)
			if errors.Is(err, errRetryNow) {
				return nil
			}
			return err
		}, func(error) { a.Trigger() })
		if ok {
			started++
		}
	}
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.reconcile.Observe(a.cfg.Now().Sub(start).Seconds())
	}
	settled := started == 0 && a.exec.Busy() == 0
	a.mu.Lock()
	// A volume that is gone from both manifests and kernel starts afresh
	// if it comes back: its history and failures go with it.
	for name := range a.events {
		if desired[name] == nil && actual[name] == nil {
			if _, busy := a.exec.Running(name); !busy {
				delete(a.events, name)
				delete(a.refusedFormats, name)
				a.conds.Forget(name)
			}
		}
	}
	first := settled && !a.settled
	a.settled = settled
	// The STATUS= line costs a status of every volume: while operations
	// run, it is refreshed at most every statusEvery, and always once
	// things settle.
	now := a.cfg.Now()
	report := settled || now.Sub(a.lastReport) >= statusEvery
	if report {
		a.lastReport = now
	}
	a.mu.Unlock()
	if first {
		a.refreshUsage()
	}
	if report {
		a.reportStatus(first)
	}
}

func driverOf(d *Desired, rec *store.Volume) string {
	if d != nil {
		return d.Driver
	}
	if rec != nil {
		return rec.Driver
	}
	return ""
}

func (a *Agent) opFunc(op Op, d *Desired, rec *store.Volume) func(context.Context) error {
	driver := driverOf(d, rec)
	switch op.Kind {
	case OpAttach:
		return func(ctx context.Context) error { return a.opAttach(ctx, d) }
	case OpMountDevice:
		return func(ctx context.Context) error { return a.opMountDevice(ctx, d) }
	case OpPublish:
		return func(ctx context.Context) error { return a.opPublish(ctx, d, op.Target) }
	case OpUnpublish:
		return func(ctx context.Context) error { return a.opUnpublish(ctx, op.Volume, driver, op.Target.Path) }
	case OpUnmountDevice:
		return func(ctx context.Context) error { return a.opUnmountDevice(ctx, op.Volume, driver) }
	case OpDetach:
		return func(ctx context.Context) error { return a.opDetach(ctx, op.Volume, driver) }
	case OpGrow:
		return func(ctx context.Context) error { return a.opGrow(ctx, d) }
	case OpRemount:
		return func(ctx context.Context) error { return a.opRemount(ctx, d, op.Target) }
	}
	return func(context.Context) error { return fmt.Errorf("unknown operation %q", op.Kind) }
}

// run logs, measures and records one operation.
func (a *Agent) run(ctx context.Context, volume, driver, op string, fn func(context.Context) error) error {
	start := a.cfg.Now()
	a.cfg.Log.Info("operation started", "volume", volume, "operation", op, "driver", driver)
	err := fn(ctx)
	d := a.cfg.Now().Sub(start)
	if errors.Is(err, errRetryNow) {
		a.cfg.Log.Info("operation found the record stale; replanning", "volume", volume, "operation", op, "driver", driver)
		return err
	}
	ev := api.Event{Time: start, Op: op, Result: "success", Duration: d.Seconds()}
	if err != nil {
		ev.Result, ev.Error = "error", err.Error()
		a.cfg.Log.Error("operation failed", "volume", volume, "operation", op, "driver", driver, "duration", d, "error", err)
	} else {
		a.cfg.Log.Info("operation finished", "volume", volume, "operation", op, "driver", driver, "duration", d)
	}
	a.cfg.Metrics.observeOp(op, driver, d, err)
	a.mu.Lock()
	evs := append(a.events[volume], ev)
	if len(evs) > eventsKept {
		evs = evs[len(evs)-eventsKept:]
	}
	a.events[volume] = evs
	a.mu.Unlock()
	return err
}

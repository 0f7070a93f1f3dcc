// Package agent is volumed's core: desired state from the manifests,
// actual state behind a durable store, the reconciler that compares them
// and the executor that acts through the drivers' interfaces.
package agent

import (
	"log/slog"
	"time"

	"github.com/volumed/volumed/agent/api"
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
	// Crypt opens encrypted volumes; nil in a build without encryption.
	Crypt   Crypt
	Log     *slog.Logger
	Metrics *Metrics
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
	// systemd's watchdog (WATCHDOG=1): a wedged loop stops petting; one
	// waiting on a program pets until OpTimeout (petting).
	WatchdogInterval time.Duration
	// ShutdownGrace is how long SIGTERM waits for running operations.
	ShutdownGrace time.Duration
	// OpTimeout bounds each operation (0: unbounded): one past it is
	// cancelled (its helper killed) and fails with a reason, retried
	// after a backoff.
	OpTimeout time.Duration
	// Wake delivers kernel events (a block device came or went, a link
	// came up) that make waiting volumes worth retrying now.
	Wake <-chan Wake
	// NetworkDrivers are the drivers whose volumes need the network;
	// `volumed shutdown --network` tears them down.
	NetworkDrivers []string
	// ReadyDir, when set, holds an empty file named after each volume a
	// service may use (readyMarks), for volumed-wait@.service.
	ReadyDir string
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
	// Unplugged: a disk or a partition went (no virtual device): what a
	// source stands on besides the volume's own device (an LV's PV, a
	// raid1 leg) may be gone, and the health checks run now.
	Unplugged bool
	// Grow: a device may have changed size.
	Grow bool
	// Added: a block device appeared; sources that take new disks in
	// (Joiner) check for one, converged or not.
	Added bool
	// Device, when set, is the kernel name ("sdb") of the one device the
	// event is about: Verify and Grow then concern only a volume on it,
	// so the events of devices that are not ours cost nothing.
	Device string
	// Facts, when set, reads the facts of the block device's event the
	// wake is for (asked at most once, and only if a volume waits): a
	// volume whose attach stated what it waits for retries only when the
	// event could bring it (decide.Concerns). A wake without them (a
	// link up, lost events) retries every waiting volume of Drivers.
	Facts func() *DeviceEvent
}

// Agent is one running volumed. Each concern keeps its own state behind
// its own lock: the desired state (manifests), the network hold, the
// growth checks asked for, the formats to remember, the owned sessions,
// the operations' history and what systemd was told. The actual state
// (State) and the executor are shared by all; only the reconcile loop
// (loop.go) starts operations.
type Agent struct {
	cfg Config
	// state is set once by reconstruct, on Run's goroutine, before
	// startedc is closed; other goroutines (the API, the metrics) read it
	// only once started() reports it set.
	state    *State
	startedc chan struct{}
	exec     *Executor
	usage    *usageCache
	conds    *conditions

	manifests *desiredState
	// external is the desired state set through SetDesired (CSI); it is
	// guarded by manifests.mu, so one snapshot sees both consistently.
	external *externalState
	hold     *networkHold
	growth   *growthRequests
	formats  *formatMemory
	idents   *identities
	sessions *ownedSessions
	history  *history
	notes    choiceNotes
	waits    waits
	sources  sourceHealth
	systemd  *systemdStatus
	waiters  statusWatch
	ready    *readyMarks
	// driftLog says each drift-check failure once, not at every resync.
	driftLog *onceLog

	// dirty: the volumes the next pass plans again. view and
	// backoffsSeen (up to when ended backoffs were marked) are the
	// reconcile loop's alone.
	dirty        *dirtySet
	view         *passView
	backoffsSeen time.Time
	// settled: what the passes planned since the agent last settled
	// (the reconcile loop's alone).
	settled settleWork

	trigger chan struct{}
	reload  chan struct{}
	// settleAfter is time.After, the wait between the retries of
	// unrecorded outcomes (tests see the waits asked for).
	settleAfter func(time.Duration) <-chan time.Time
	// watchdog is set by Run before its loop, which alone pets it.
	watchdog petting
}

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
	exec := NewExecutor(cfg.Parallel, cfg.Now)
	exec.timeout = cfg.OpTimeout
	a := &Agent{
		cfg:       cfg,
		exec:      exec,
		usage:     newUsageCache(),
		conds:     newConditions(cfg.Now),
		manifests: &desiredState{volumes: map[string]*Desired{}},
		external:  &externalState{},
		hold:      &networkHold{drivers: cfg.NetworkDrivers},
		growth:    &growthRequests{},
		formats:   newFormatMemory(),
		idents:    &identities{store: cfg.Store, yield: exec.Yield},
		sessions:  newOwnedSessions(),
		history:   newHistory(),
		systemd:   &systemdStatus{},
		ready:     newReadyMarks(cfg.ReadyDir),
		driftLog:  newOnceLog(cfg.Log),
		dirty:     newDirtySet(),
		view:      newPassView(),
		trigger:   make(chan struct{}, 1),
		reload:    make(chan struct{}, 1),
		startedc:  make(chan struct{}),

		settleAfter: time.After,
	}
	if cfg.Metrics != nil {
		cfg.Metrics.Registry.MustRegister(&volumeCollector{a: a}, &sourceCollector{a: a})
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

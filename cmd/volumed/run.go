package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/csi"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/luks"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/internal/size"
	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/kinds/lvm/provisioner"
	"github.com/volumed/volumed/store"
)

// checkStateCommand is the hidden subcommand the agent runs in a child
// process to check a state file: bbolt may panic or die of SIGBUS on a
// damaged file, and only the child should die of it.
const checkStateCommand = "__check-state"

func cmdCheckState(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: volumed", checkStateCommand, "FILE")
		return 2
	}
	if err := store.CheckFile(args[0]); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// runFlags are the flags of `volumed run`.
type runFlags struct {
	configDirs   multiFlag
	stateDir     string
	socket       string
	readyDir     string
	metricsAddr  string
	resync       time.Duration
	logFormat    string
	logLevel     string
	parallel     int
	opTimeout    time.Duration
	firmwareRoot string
	csiEndpoint  string
	nodeID       string
	csiSuidDev   bool
	loopPool     string
	loopReserve  string
	lvmGroups    string
}

func parseRunFlags(args []string, stderr io.Writer) (*runFlags, error) {
	f := &runFlags{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Var(&f.configDirs, "config-dir", "manifest directory (repeatable; replaces the default drop-in directories)")
	fs.StringVar(&f.stateDir, "state-dir", "/var/lib/volumed", "state directory (state.db, staging mounts)")
	fs.StringVar(&f.socket, "socket", defaultSocket, "unix socket of the local API")
	fs.StringVar(&f.readyDir, "ready-dir", "", "directory of the ready marks volumed-wait@.service tests; emptied at each start and stop (default "+defaultReadyDir+" with the default --socket, none with another)")
	fs.StringVar(&f.metricsAddr, "metrics-address", "127.0.0.1:9760", "Prometheus listener (empty disables)")
	fs.DurationVar(&f.resync, "resync", time.Minute, "period of the drift check and manifest re-read")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.IntVar(&f.parallel, "parallel", 32, "operations running at once (across volumes)")
	fs.DurationVar(&f.opTimeout, "op-timeout", 30*time.Minute, "bound on one operation (a mkfs, a mount, a login): past it the operation is stopped, fails with the reason and is retried after a backoff (0: unbounded)")
	fs.StringVar(&f.firmwareRoot, "firmware-root", "/", "root of the tree holding /sys/firmware, /etc/iscsi and /etc/nvme (for tests and chroots)")
	fs.StringVar(&f.csiEndpoint, "csi-endpoint", "", "also serve the CSI node service on this unix:// socket")
	fs.StringVar(&f.nodeID, "node-id", "", "CSI node ID (default: the host name)")
	fs.BoolVar(&f.csiSuidDev, "csi-allow-suid-dev", false, "let a CSI volume context set filesystem.allowSuid/allowDev (default: refused; CSI mounts are nosuid,nodev)")
	fs.StringVar(&f.loopPool, "csi-loop-pool", "", "serve the CSI Controller service too, provisioning `backend: loop` volumes as image files in this directory (needs --csi-endpoint)")
	fs.StringVar(&f.loopReserve, "csi-loop-reserve", "1Gi", "space the loop pool keeps free on its filesystem: never promised to a volume")
	fs.StringVar(&f.lvmGroups, "csi-lvm-volume-groups", "", "serve the CSI Controller service too, provisioning `backend: lvm` volumes as LVs in these volume groups (comma-separated; needs --csi-endpoint)")
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("run: unexpected argument %q", fs.Arg(0))
	}
	if f.loopPool != "" && f.csiEndpoint == "" {
		return nil, fmt.Errorf("--csi-loop-pool: needs --csi-endpoint (the Controller service is served beside the node service)")
	}
	if f.lvmGroups != "" && f.csiEndpoint == "" {
		return nil, fmt.Errorf("--csi-lvm-volume-groups: needs --csi-endpoint (the Controller service is served beside the node service)")
	}
	for _, vg := range f.groups() {
		if why := lvmdrv.CheckName(vg); why != "" {
			return nil, fmt.Errorf("--csi-lvm-volume-groups: %q: %s", vg, why)
		}
	}
	return f, nil
}

// groups are the lvm backend's volume groups.
func (f *runFlags) groups() []string {
	var out []string
	for _, vg := range strings.Split(f.lvmGroups, ",") {
		if vg = strings.TrimSpace(vg); vg != "" {
			out = append(out, vg)
		}
	}
	return out
}

// prepare checks the state directory, creates it and returns the
// manifest directories to read.
func (f *runFlags) prepare() ([]string, error) {
	dirs := []string(f.configDirs)
	if len(dirs) == 0 {
		dirs = manifest.DefaultDirs()
	}
	if !filepath.IsAbs(f.stateDir) {
		return nil, fmt.Errorf("--state-dir must be absolute, got %q", f.stateDir)
	}
	f.stateDir = filepath.Clean(f.stateDir)
	if err := os.MkdirAll(filepath.Join(f.stateDir, "staging"), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return dirs, nil
}

// manifestCacheFile, in the state directory, holds the manifests' parse
// across restarts (manifest.Builder.Save).
const manifestCacheFile = "manifest-cache.json"

func cmdRun(ctx context.Context, args []string, stderr io.Writer) error {
	began := time.Now()
	restoreGC := raiseGCForStart()
	defer restoreGC()
	f, err := parseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	dirs, err := f.prepare()
	if err != nil {
		return err
	}

	// The sockets are taken before the agent acts on anything: an agent
	// that cannot have them (another one answers there) must exit having
	// touched no volume and no state file.
	apiLn, csiLn, err := listen(f)
	if err != nil {
		return err
	}
	defer apiLn.Close()
	if csiLn != nil {
		defer csiLn.Close()
	}

	metrics := agent.NewMetrics(version)
	st, recovery, err := openState(f.stateDir, metrics, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.CloseWithin(5 * time.Second); err != nil {
			log.Error("state file", "error", err)
		}
	}()
	host, boot := loadFirmware(f.firmwareRoot, log)
	notify, wd := systemd(log)
	notify = atReady(notify, restoreGC)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ks := kinds.All()
	wakes := watchKernel(ctx, log, kinds.AwaitDisk(ks), kinds.Network(ks))
	manifestOpts := manifest.Options{StateDir: f.stateDir, CheckOwnership: true, Kinds: kinds.Manifest(ks)}
	// The parse of every manifest is kept beside the state at a stop, so
	// that a restart decodes only what changed meanwhile.
	builderOpts := manifestOpts
	builderOpts.CacheFile = filepath.Join(f.stateDir, manifestCacheFile)
	manifests := manifest.NewBuilder(dirs, builderOpts)
	defer func() {
		if err := manifests.Save(); err != nil {
			log.Warn("cannot keep the manifests' parse for the next start", "error", err)
		}
	}()
	a := agent.New(agent.Config{
		StateDir:         f.stateDir,
		Manifests:        manifests,
		WatchDirs:        dirs,
		Store:            st,
		Attachers:        attachers(ks, kind.Env{LoopTag: loopTag(f.stateDir), Host: host, Boot: boot}),
		Host:             apiHost(host),
		BootVolumes:      apiBoot(boot),
		Wake:             wakes,
		NetworkDrivers:   kinds.Network(ks),
		FS:               filesystems{},
		Mounter:          mounter{},
		Crypt:            crypt{c: &luks.Client{}, answers: &luks.Answers{}},
		Log:              log,
		Metrics:          metrics,
		Resync:           f.resync,
		Parallel:         f.parallel,
		OpTimeout:        f.opTimeout,
		Notify:           notify,
		StateRecovery:    recovery,
		ReadyDir:         f.marks(),
		WatchdogInterval: wd / 2,
	})
	defer reloadOnHangup(ctx, a, notify)()

	errc, err := startServers(ctx, a, f, apiLn, csiLn, manifestOpts, log)
	if err != nil {
		return err
	}
	log.Info("volumed starting", "version", version, "configDirs", dirs, "stateDir", f.stateDir, "socket", f.socket,
		"setup", time.Since(began).Round(time.Microsecond))
	return runAgent(ctx, stop, a, errc)
}

// runAgent runs the agent until it stops; a server that fails stops it
// (stop) and both errors are returned.
func runAgent(ctx context.Context, stop context.CancelFunc, a *agent.Agent, errc <-chan error) error {
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	select {
	case err := <-runErr:
		return err
	case err := <-errc:
		if err != nil {
			stop()
			// What the agent hit while stopping is said too.
			return errors.Join(err, <-runErr)
		}
		return <-runErr
	}
}

// defaultReadyDir is where volumed-wait@.service looks for the marks.
const defaultReadyDir = "/run/volumed/ready"

// marks is the directory of the ready marks ("": none kept). The agent
// empties it at each start and stop, so only the host's agent (on the
// default socket) or one told to keeps them: another one (a test's, on
// a socket of its own) must not empty the host's, nor a directory that
// happens to sit beside its socket.
func (f *runFlags) marks() string {
	if f.readyDir != "" {
		return f.readyDir
	}
	if f.socket == defaultSocket {
		return defaultReadyDir
	}
	return ""
}

// listen takes the local API's socket and, when asked for, the CSI
// endpoint (another agent, with another state dir, may answer on it).
func listen(f *runFlags) (apiLn, csiLn net.Listener, err error) {
	apiLn, err = agent.ListenAPI(f.socket)
	if err != nil {
		return nil, nil, err
	}
	if f.csiEndpoint != "" {
		if csiLn, err = csi.Listen(f.csiEndpoint); err != nil {
			_ = apiLn.Close()
			return nil, nil, err
		}
	}
	return apiLn, csiLn, nil
}

// systemd returns how to tell systemd of the agent's state and the
// watchdog's interval (0: no watchdog).
func systemd(log *slog.Logger) (notify func(string), watchdog time.Duration) {
	notify = func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			log.Debug("sd_notify", "error", err)
		}
	}
	wd, _ := daemon.SdWatchdogEnabled(false)
	return notify, wd
}

// openState opens (and if damaged, rebuilds) the state file. recovery
// says what was done to a damaged one, for the agent's status.
func openState(stateDir string, metrics *agent.Metrics, log *slog.Logger) (st *store.Store, recovery string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("find own executable: %w", err)
	}
	st, rec, err := store.Open(filepath.Join(stateDir, "state.db"), store.Options{
		Check:    store.ChildCheck(exe, checkStateCommand),
		OnCommit: metrics.ObserveCommit,
	})
	if err != nil {
		return nil, "", fmt.Errorf("open state: %w", err)
	}
	if rec != nil {
		recovery = fmt.Sprintf("state file was damaged (%s); moved aside to %s and rebuilt from the kernel", rec.Reason, rec.MovedTo)
		log.Error("state file damaged; rebuilding from the kernel", "reason", rec.Reason, "movedTo", rec.MovedTo)
		metrics.StateRecovered()
	}
	return st, recovery, nil
}

// loadFirmware reads the host's identity and the volumes it booted
// from; what cannot be read is warned about, not fatal.
func loadFirmware(root string, log *slog.Logger) (firmware.HostIdentity, []firmware.BootVolume) {
	host, err := firmware.LoadHostIdentity(root)
	if err != nil {
		log.Warn("host identity incomplete", "error", err)
	}
	boot, err := firmware.BootVolumes(root)
	if err != nil {
		log.Warn("boot firmware tables", "error", err)
	}
	for _, b := range boot {
		log.Info("pinned: the host booted from it", "from", b.Source, "driver", b.Driver, "target", bootTarget(b))
	}
	return host, boot
}

// reloadOnHangup re-reads the manifests on SIGHUP until ctx ends; the
// returned func stops listening for the signal.
func reloadOnHangup(ctx context.Context, a *agent.Agent, notify func(string)) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", monotonicUsec()))
				a.Reload()
			}
		}
	}()
	return func() { signal.Stop(hup) }
}

// startServers serves the local API, the metrics and (when asked for)
// the CSI node service until ctx ends; each server's end is sent on the
// returned channel.
func startServers(ctx context.Context, a *agent.Agent, f *runFlags, apiLn, csiLn net.Listener,
	manifestOpts manifest.Options, log *slog.Logger) (<-chan error, error) {
	errc := make(chan error, 3)
	if f.csiEndpoint != "" {
		// Restored before Run: the first pass must see the kubelet's
		// volumes, or it would tear them down.
		reserve, err := size.Parse(f.loopReserve)
		if err != nil {
			return nil, fmt.Errorf("--csi-loop-reserve %q: %w", f.loopReserve, err)
		}
		svc, err := startCSI(csi.Config{Agent: a, NodeID: f.nodeID, Dir: filepath.Join(f.stateDir, "csi"), Manifest: manifestOpts, AllowSuidDev: f.csiSuidDev,
			LoopPool: f.loopPool, LoopReserve: reserve, LVMGroups: f.groups(), LVM: provisioner.Provisioner{}}, f.csiEndpoint, log)
		if err != nil {
			return nil, err
		}
		go func() { errc <- svc.Serve(ctx, csiLn) }()
	}
	go func() { errc <- a.ServeAPI(ctx, apiLn) }()
	if f.metricsAddr != "" {
		go func() { errc <- a.ServeMetrics(ctx, f.metricsAddr) }()
	}
	return errc, nil
}

// startCSI restores the CSI volumes kept by an earlier run. It serves
// from the same agent, state file and executor as the manifests: one
// agent per host owns the state.
func startCSI(cfg csi.Config, endpoint string, log *slog.Logger) (*csi.Service, error) {
	if cfg.NodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--node-id: %w", err)
		}
		cfg.NodeID = h
	}
	cfg.Version, cfg.Log = version, log.With("service", "csi")
	svc, err := csi.New(cfg)
	if err != nil {
		return nil, err
	}
	log.Info("serving the CSI node service", "endpoint", endpoint, "driver", csi.DriverName, "nodeID", cfg.NodeID, "allowSuidDev", cfg.AllowSuidDev,
		"controller", cfg.LoopPool != "" || len(cfg.LVMGroups) > 0, "loopPool", cfg.LoopPool, "lvmVolumeGroups", cfg.LVMGroups)
	return svc, nil
}

func monotonicUsec() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano() / 1000
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
}

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
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/csi"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/luks"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/kind"
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

func cmdRun(ctx context.Context, args []string, stderr io.Writer) error {
	began := time.Now()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var configDirs multiFlag
	fs.Var(&configDirs, "config-dir", "manifest directory (repeatable; replaces the default drop-in directories)")
	stateDir := fs.String("state-dir", "/var/lib/volumed", "state directory (state.db, staging mounts)")
	socket := fs.String("socket", defaultSocket, "unix socket of the local API")
	metricsAddr := fs.String("metrics-address", "127.0.0.1:9760", "Prometheus listener (empty disables)")
	resync := fs.Duration("resync", time.Minute, "period of the drift check and manifest re-read")
	logFormat := fs.String("log-format", "text", "text or json")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	parallel := fs.Int("parallel", 32, "operations running at once (across volumes)")
	opTimeout := fs.Duration("op-timeout", 30*time.Minute, "bound on one operation (a mkfs, a mount, a login): past it the operation is stopped, fails with the reason and is retried after a backoff (0: unbounded)")
	firmwareRoot := fs.String("firmware-root", "/", "root of the tree holding /sys/firmware, /etc/iscsi and /etc/nvme (for tests and chroots)")
	csiEndpoint := fs.String("csi-endpoint", "", "also serve the CSI node service on this unix:// socket")
	nodeID := fs.String("node-id", "", "CSI node ID (default: the host name)")
	csiSuidDev := fs.Bool("csi-allow-suid-dev", false, "let a CSI volume context set filesystem.allowSuid/allowDev (default: refused; CSI mounts are nosuid,nodev)")
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("run: unexpected argument %q", fs.Arg(0))
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	dirs := []string(configDirs)
	if len(dirs) == 0 {
		dirs = manifest.DefaultDirs()
	}
	if !filepath.IsAbs(*stateDir) {
		return fmt.Errorf("--state-dir must be absolute, got %q", *stateDir)
	}
	*stateDir = filepath.Clean(*stateDir)
	if err := os.MkdirAll(filepath.Join(*stateDir, "staging"), 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}

	// The socket is taken before the agent acts on anything: an agent
	// that cannot have it (another one answers there) must exit having
	// touched no volume and no state file.
	apiLn, err := agent.ListenAPI(*socket)
	if err != nil {
		return err
	}
	defer apiLn.Close()
	// The CSI endpoint likewise: another agent (with another state dir)
	// may answer on it.
	var csiLn net.Listener
	if *csiEndpoint != "" {
		if csiLn, err = csi.Listen(*csiEndpoint); err != nil {
			return err
		}
		defer csiLn.Close()
	}

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	metrics := agent.NewMetrics(version)

	statePath := filepath.Join(*stateDir, "state.db")
	st, rec, err := store.Open(statePath, store.Options{
		Check:    store.ChildCheck(exe, checkStateCommand),
		OnCommit: metrics.ObserveCommit,
	})
	if err != nil {
		return fmt.Errorf("open state: %w", err)
	}
	defer func() {
		if err := st.CloseWithin(5 * time.Second); err != nil {
			log.Error("state file", "error", err)
		}
	}()
	recovery := ""
	if rec != nil {
		recovery = fmt.Sprintf("state file was damaged (%s); moved aside to %s and rebuilt from the kernel", rec.Reason, rec.MovedTo)
		log.Error("state file damaged; rebuilding from the kernel", "reason", rec.Reason, "movedTo", rec.MovedTo)
		metrics.StateRecovered()
	}

	host, err := firmware.LoadHostIdentity(*firmwareRoot)
	if err != nil {
		log.Warn("host identity incomplete", "error", err)
	}
	boot, err := firmware.BootVolumes(*firmwareRoot)
	if err != nil {
		log.Warn("boot firmware tables", "error", err)
	}
	for _, b := range boot {
		log.Info("pinned: the host booted from it", "from", b.Source, "driver", b.Driver, "target", bootTarget(b))
	}

	notify := func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			log.Debug("sd_notify", "error", err)
		}
	}
	wd, _ := daemon.SdWatchdogEnabled(false)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ks := kinds.All()
	wakes := watchKernel(ctx, log, kinds.AwaitDisk(ks), kinds.Network(ks))

	manifestOpts := manifest.Options{StateDir: *stateDir, CheckOwnership: true, Kinds: kinds.Manifest(ks)}
	a := agent.New(agent.Config{
		StateDir:         *stateDir,
		Manifests:        manifest.NewBuilder(dirs, manifestOpts),
		WatchDirs:        dirs,
		Store:            st,
		Attachers:        attachers(ks, kind.Env{LoopTag: loopTag(*stateDir), Host: host, Boot: boot}),
		Host:             apiHost(host),
		BootVolumes:      apiBoot(boot),
		Wake:             wakes,
		NetworkDrivers:   kinds.Network(ks),
		FS:               filesystems{},
		Mounter:          mounter{},
		Crypt:            crypt{c: &luks.Client{}},
		Log:              log,
		Metrics:          metrics,
		Resync:           *resync,
		Parallel:         *parallel,
		OpTimeout:        *opTimeout,
		Notify:           notify,
		StateRecovery:    recovery,
		WatchdogInterval: wd / 2,
	})

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
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

	errc := make(chan error, 3)
	if *csiEndpoint != "" {
		// Restored before Run: the first pass must see the kubelet's
		// volumes, or it would tear them down.
		svc, err := startCSI(csi.Config{Agent: a, NodeID: *nodeID, Dir: filepath.Join(*stateDir, "csi"), Manifest: manifestOpts, AllowSuidDev: *csiSuidDev}, *csiEndpoint, log)
		if err != nil {
			return err
		}
		go func() { errc <- svc.Serve(ctx, csiLn) }()
	}
	go func() { errc <- a.ServeAPI(ctx, apiLn) }()
	if *metricsAddr != "" {
		go func() { errc <- a.ServeMetrics(ctx, *metricsAddr) }()
	}
	log.Info("volumed starting", "version", version, "configDirs", dirs, "stateDir", *stateDir, "socket", *socket,
		"setup", time.Since(began).Round(time.Microsecond))
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
	log.Info("serving the CSI node service", "endpoint", endpoint, "driver", csi.DriverName, "nodeID", cfg.NodeID, "allowSuidDev", cfg.AllowSuidDev)
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

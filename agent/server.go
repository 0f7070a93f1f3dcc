package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"
)

const (
	// metricsConns caps the metrics listener's open connections. Anyone
	// on the host may connect, and each accepted connection costs the
	// agent a file descriptor it needs for manifests, devices and its
	// socket; a scraper uses one. Connections over the cap wait in the
	// kernel's backlog, which costs the agent nothing.
	metricsConns = 16
	// idleTimeout closes keep-alive connections nobody uses, so that a
	// client holding them cannot keep a slot of the cap forever.
	idleTimeout = 30 * time.Second
	// readHeaderTimeout closes connections that never finish a request.
	readHeaderTimeout = 5 * time.Second
	// refusedPeerWarnEvery bounds the warnings about a refused peer, per
	// uid: a local user looping on connect must not flood the journal.
	refusedPeerWarnEvery = 10 * time.Second
)

// ListenAPI opens the local API's unix socket (mode 0600). It is called
// before the agent runs, so that an agent that cannot have its socket
// exits before it touches a volume. A socket that another agent answers
// on is never taken over: that agent would keep running unreachable, and
// both would act on the host.
func ListenAPI(socket string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	// Without the lock, two agents starting at once could both find the
	// socket stale, and the later one's removal would unlink the socket
	// the first had just made.
	unlock, err := lockPath(socket + ".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := removeStaleSocket(socket); err != nil {
		return nil, err
	}
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", socket)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", socket, err)
	}
	return ln, nil
}

// lockPath takes an exclusive flock on path (made if missing) and
// returns its release. The file is left in place: removing a lock file
// would let two processes lock two different files of the same name.
func lockPath(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("socket lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// removeStaleSocket removes the socket a previous run left behind, and
// refuses when a live agent still answers on it: only a refused
// connection (nobody listens) or a vanished file means stale.
func removeStaleSocket(socket string) error {
	fi, err := os.Lstat(socket)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", socket, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", socket)
	}
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("another volumed answers on the socket %s; refusing to take it over (stop that agent, or give this one another --socket)", socket)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, fs.ErrNotExist) {
		// A timeout is an agent too busy to accept, not a dead one.
		return fmt.Errorf("socket %s: cannot tell whether another volumed answers on it: %w", socket, err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", socket, err)
	}
	return nil
}

// ServeAPI serves the local JSON API on ln (from ListenAPI; root peers
// only) until ctx is done.
func (a *Agent) ServeAPI(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		if !a.started() {
			http.Error(w, errStarting, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.StatusReply())
	})
	mux.HandleFunc("POST /v1/shutdown-network", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.ShutdownNetwork(r.Context()))
	})
	mux.HandleFunc("POST /v1/resume-network", func(w http.ResponseWriter, r *http.Request) {
		a.ResumeNetwork()
		w.WriteHeader(http.StatusNoContent)
	})
	return serve(ctx, &rootOnly{Listener: ln, warn: newPeerWarnings(a.cfg.Log, a.cfg.Now, refusedPeerWarnEvery)}, mux)
}

// errStarting is the API's answer until the actual state is reconstructed.
const errStarting = "volumed is starting: its actual state is not reconstructed yet"

// ServeMetrics serves /metrics on addr until ctx is done.
func (a *Agent) ServeMetrics(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", newHeapRelease(a.cfg.Now).after(promhttp.HandlerFor(a.cfg.Metrics.Registry, promhttp.HandlerOpts{})))
	return serve(ctx, netutil.LimitListener(ln, metricsConns), mux)
}

func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// rootOnly drops connections from peers that are not root (SO_PEERCRED):
// the status shows paths and devices of the host.
type rootOnly struct {
	net.Listener
	warn *peerWarnings
}

func (l *rootOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			return c, nil
		}
		raw, err := uc.SyscallConn()
		if err != nil {
			c.Close()
			continue
		}
		var cred *unix.Ucred
		var cerr error
		_ = raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
		if cerr != nil || cred.Uid != 0 {
			l.warn.refused(credUID(cred))
			c.Close()
			continue
		}
		return c, nil
	}
}

func credUID(c *unix.Ucred) int64 {
	if c == nil {
		return -1
	}
	return int64(c.Uid)
}

// peerWarnings logs a refused peer at most once per interval per uid,
// with the count of refusals not logged since the last warning.
type peerWarnings struct {
	log   *slog.Logger
	now   func() time.Time
	every time.Duration

	mu   sync.Mutex
	uids map[int64]*peerWarning
}

type peerWarning struct {
	last       time.Time
	suppressed int
}

// peerWarningsKept bounds the per-uid memory: past it, the uids whose
// interval is over and that have nothing left to report are forgotten.
const peerWarningsKept = 1024

func newPeerWarnings(log *slog.Logger, now func() time.Time, every time.Duration) *peerWarnings {
	return &peerWarnings{log: log, now: now, every: every, uids: map[int64]*peerWarning{}}
}

func (p *peerWarnings) refused(uid int64) {
	p.mu.Lock()
	now := p.now()
	w := p.uids[uid]
	if w != nil && now.Sub(w.last) < p.every {
		w.suppressed++
		p.mu.Unlock()
		return
	}
	if len(p.uids) >= peerWarningsKept {
		for u, o := range p.uids {
			if o.suppressed == 0 && now.Sub(o.last) >= p.every {
				delete(p.uids, u)
			}
		}
	}
	suppressed := 0
	if w != nil {
		suppressed = w.suppressed
	}
	p.uids[uid] = &peerWarning{last: now}
	p.mu.Unlock()
	attrs := []any{"uid", uid}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed, "interval", p.every)
	}
	p.log.Warn("refused a non-root client on the socket", attrs...)
}

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
)

// ServeAPI serves the local JSON API on a unix socket (mode 0600, root
// peers only) until ctx is done.
func (a *Agent) ServeAPI(ctx context.Context, socket string) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	_ = os.Remove(socket) // a stale socket of a previous run
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", socket)
	unix.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
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
	return serve(ctx, &rootOnly{Listener: ln, log: a}, mux)
}

// ServeMetrics serves /metrics on addr until ctx is done.
func (a *Agent) ServeMetrics(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.cfg.Metrics.Registry, promhttp.HandlerOpts{}))
	return serve(ctx, ln, mux)
}

func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
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
	log *Agent
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
			l.log.cfg.Log.Warn("refused a non-root client on the socket", "uid", credUID(cred))
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

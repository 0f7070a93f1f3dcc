package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/volumed/volumed/internal/unixsock"
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
)

// ListenAPI opens the local API's unix socket (mode 0600). It is called
// before the agent runs, so that an agent that cannot have its socket
// exits before it touches a volume.
func ListenAPI(socket string) (net.Listener, error) {
	return unixsock.Listen(socket, unixsock.Options{DirMode: 0o755, Flag: "--socket"})
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
		writeJSON(w, a.StatusReply())
	})
	mux.HandleFunc("GET /v1/wait", a.serveWait)
	mux.HandleFunc("POST /v1/shutdown-network", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, a.ShutdownNetwork(r.Context()))
	})
	mux.HandleFunc("POST /v1/resume-network", func(w http.ResponseWriter, r *http.Request) {
		a.ResumeNetwork()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/volumes/{name}/recovery-key", a.serveRecoveryKey)
	return serve(ctx, unixsock.RootOnly(ln, a.cfg.Log, a.cfg.Now), mux)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
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

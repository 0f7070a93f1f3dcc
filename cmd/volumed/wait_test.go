package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/volumed/volumed/agent/api"
)

// An agent older than GET /v1/wait (a package upgrade: the new volumed
// wait against the agent still running) is polled for its status as
// before: wait still returns once the volume is Ready, and asks the
// missing endpoint once, not at every poll.
func TestWaitPollsAnAgentWithoutTheWaitEndpoint(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var polls, others atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		phase := api.PhasePending
		if polls.Add(1) > 3 {
			phase = api.PhaseReady
		}
		_ = json.NewEncoder(w).Encode(api.Status{Volumes: []api.Volume{{Name: "a", File: "/etc/volumed/volumes.d/a.yaml", Phase: phase}}})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		others.Add(1)
		http.NotFound(w, r)
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if err := cmdWait(context.Background(), []string{"a", "--socket", sock, "--timeout", "20s"}, io.Discard); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if n := polls.Load(); n != 4 {
		t.Errorf("%d status polls, want 4 (Ready at the fourth)", n)
	}
	if n := others.Load(); n != 1 {
		t.Errorf("the old agent was asked %d times for what it does not serve, want once", n)
	}
}

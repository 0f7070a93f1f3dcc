package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/api"
)

// Until the actual state is reconstructed the API says the agent is
// starting, instead of an empty list (which `wait --fail-missing` would
// take for "no such volume") or a crash of `shutdown --network`.
func TestAPIWhileStarting(t *testing.T) {
	a := New(Config{})
	c := api.NewClient(serveAPI(t, a))
	if _, err := c.Status(context.Background()); err == nil || !strings.Contains(err.Error(), "503 Service Unavailable: volumed is starting") {
		t.Errorf("status while starting: %v, want 503 starting", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	if r := a.ShutdownNetwork(sctx); len(r.Remaining) != 1 || r.Remaining[0] != errStarting {
		t.Errorf("shutdown --network while starting: %+v, want it still waiting for the start", r)
	}
}

// serveAPI serves a's API on a socket in a temp dir until the test ends
// and returns the socket.
func serveAPI(t *testing.T, a *Agent) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "volumed.sock")
	ln, err := ListenAPI(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.ServeAPI(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return sock
}

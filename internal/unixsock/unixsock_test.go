package unixsock

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A local user looping on connect gets one warning per interval per uid,
// and the next warning says how many were left out; another uid is not
// hidden behind the first.
func TestRefusedPeerWarningsAreRateLimited(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	now := time.Unix(1_000_000, 0)
	w := newPeerWarnings(log.With("socket", "/x.sock"), func() time.Time { return now }, 10*time.Second)
	for range 1000 {
		w.refused(1000)
		now = now.Add(time.Millisecond) // a second of flooding
	}
	w.refused(1001)
	now = now.Add(9 * time.Second) // 10 s after the first warning
	w.refused(1000)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=WARN msg="refused a non-root client on the socket" socket=/x.sock uid=1000`,
		`level=WARN msg="refused a non-root client on the socket" socket=/x.sock uid=1001`,
		`level=WARN msg="refused a non-root client on the socket" socket=/x.sock uid=1000 suppressed=999 interval=10s`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", buf.String(), strings.Join(want, "\n"))
	}
}

// The memory kept per uid stays bounded when many uids connect.
func TestRefusedPeerWarningsForgetQuietUIDs(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	w := newPeerWarnings(slog.New(slog.DiscardHandler), func() time.Time { return now }, 10*time.Second)
	for uid := range int64(10 * peerWarningsKept) {
		w.refused(uid)
		now = now.Add(time.Second)
	}
	if n := len(w.uids); n > peerWarningsKept+1 {
		t.Errorf("%d uids remembered, want at most %d", n, peerWarningsKept+1)
	}
}

// Listen takes over a socket nobody answers on, refuses one a live
// agent answers on (naming it), and never removes what is not a socket.
func TestListenReplacesOnlyStaleSockets(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "volumed.sock")

	// Stale: a socket file whose listener is gone (as after SIGKILL).
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	ln, err := Listen(sock, Options{DirMode: 0o755, Flag: "--socket"})
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	defer ln.Close()

	if _, err := Listen(sock, Options{DirMode: 0o755, Flag: "--socket"}); err == nil || !strings.Contains(err.Error(), "another volumed answers on the socket "+sock) {
		t.Errorf("live socket: got %v, want a refusal naming %s", err, sock)
	}
	if c, err := net.Dial("unix", sock); err != nil {
		t.Errorf("the first listener lost its socket: %v", err)
	} else {
		c.Close()
	}

	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, Options{DirMode: 0o755, Flag: "--socket"}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: got %v, want a refusal", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("the regular file was touched: %q, %v", b, err)
	}
}

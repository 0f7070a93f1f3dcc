// Package tangtest runs Debian's real Tang server (tangd, from the tang
// package) for a test: keys made by tangd-keygen in the test's own
// directory, each connection to a loopback port handed to a fresh tangd
// as its stdin and stdout, the way systemd's tangd.socket (Accept=yes)
// and inetd run it.
package tangtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/volumed/volumed/drivers/tang"
	"github.com/volumed/volumed/internal/testtool"
)

const (
	tangd     = "/usr/libexec/tangd"
	keygen    = "/usr/libexec/tangd-keygen"
	rotate    = "/usr/libexec/tangd-rotate-keys"
	installed = "tang-common"
)

// Server is a running tangd.
type Server struct {
	URL string
	Dir string // its key database

	t    testing.TB
	addr string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
	logs  bytes.Buffer
}

// Start makes keys and serves them until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	for _, p := range []string{tangd, keygen, rotate} {
		testtool.Need(t, installed, p)
	}
	s := &Server{t: t, Dir: filepath.Join(t.TempDir(), "db")}
	if err := os.Mkdir(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(keygen, s.Dir).CombinedOutput(); err != nil {
		t.Fatalf("tangd-keygen: %v: %s", err, out)
	}
	s.listen("127.0.0.1:0")
	s.URL = "http://" + s.addr
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("tangd's log:\n%s", s.logs.String())
			s.mu.Unlock()
		}
	})
	return s
}

// Twin is a second server with the same keys on another port: one Tang
// replicated behind two names.
func (s *Server) Twin(t testing.TB) *Server {
	t.Helper()
	tw := &Server{t: t, Dir: s.Dir}
	tw.listen("127.0.0.1:0")
	tw.URL = "http://" + tw.addr
	t.Cleanup(tw.Stop)
	return tw
}

func (s *Server) listen(addr string) {
	s.t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatalf("tang listen: %v", err)
	}
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr().String()
	s.mu.Unlock()
	s.wg.Add(1)
	go s.serve(ln)
}

func (s *Server) serve(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
		}()
	}
}

// handle gives the connection to one tangd, which answers one request.
func (s *Server) handle(c net.Conn) {
	s.mu.Lock()
	if s.conns == nil {
		s.conns = map[net.Conn]bool{}
	}
	s.conns[c] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		return
	}
	defer f.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(tangd, s.Dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, f, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logs.Write(stderr.Bytes())
	if err != nil {
		s.logs.WriteString("tangd: " + err.Error() + "\n")
	}
}

// Stop closes the port and every connection: the server is down.
// (tangd waits on a kept-alive connection for another request.)
func (s *Server) Stop() {
	s.mu.Lock()
	ln := s.ln
	s.ln = nil
	for c := range s.conns {
		// Shut down, not closed: the handler closes it once tangd exits.
		_ = c.(*net.TCPConn).CloseRead()
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	s.wg.Wait()
}

// Resume serves again on the same port.
func (s *Server) Resume() {
	s.t.Helper()
	s.listen(s.addr)
}

// Thumbprint is the SHA-256 thumbprint of the server's (advertised)
// signing key, as tang-show-keys prints it.
func (s *Server) Thumbprint() string {
	s.t.Helper()
	thps := s.thumbprints("sign")
	if len(thps) != 1 {
		s.t.Fatalf("tang %s: %d advertised signing keys, want 1", s.Dir, len(thps))
	}
	return thps[0]
}

// thumbprints reads the advertised keys (tangd's files not hidden by a
// rotation) that do op.
func (s *Server) thumbprints(op string) []string {
	s.t.Helper()
	files, err := filepath.Glob(filepath.Join(s.Dir, "*.jwk"))
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), ".") {
			continue // hidden by a rotation: not advertised
		}
		b, err := os.ReadFile(f)
		if err != nil {
			s.t.Fatal(err)
		}
		var meta struct {
			KeyOps []string `json:"key_ops"`
		}
		var k jose.JSONWebKey
		if err := errors.Join(json.Unmarshal(b, &meta), k.UnmarshalJSON(b)); err != nil {
			s.t.Fatalf("%s: %v", f, err)
		}
		if !slices.Contains(meta.KeyOps, op) {
			continue
		}
		thp, err := tang.Thumbprint(k.Public())
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, thp)
	}
	return out
}

// Rotate makes new keys with tangd-rotate-keys: the old ones are no
// longer advertised but still recover what was bound to them.
func (s *Server) Rotate() {
	s.t.Helper()
	out, err := exec.Command(rotate, "-d", s.Dir).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tangd-rotate-keys: %v: %s", err, out)
	}
}

// Package swtpmtest starts a software TPM2 (swtpm) for a test, with its
// own state directory, listening on a unix socket that tpm2.Open takes.
package swtpmtest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/testtool"
)

// Start runs swtpm until the test ends and returns its socket's path.
// Without swtpm the test is skipped (or fails under make test and CI).
func Start(t testing.TB) string {
	t.Helper()
	bin := testtool.Need(t, "swtpm", "swtpm")[0]
	// A unix socket's path has room for 107 bytes; t.TempDir can be
	// longer.
	dir, err := os.MkdirTemp("", "swtpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "tpm.sock")
	var out bytes.Buffer
	cmd := exec.Command(bin, "socket", "--tpm2",
		"--tpmstate", "dir="+state,
		"--server", "type=unixio,path="+sock,
		// tpm2-tss's swtpm TCTI (systemd's way to a software TPM)
		// finds the control socket next to the server's.
		"--ctrl", "type=unixio,path="+sock+".ctrl",
		"--flags", "not-need-init,startup-clear",
		"--log", "level=0")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start swtpm: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		// Killed, it says so; what it printed says more when a test
		// failed against it.
		if err := <-exited; t.Failed() {
			t.Logf("swtpm (%v):\n%s", err, out.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The socket file appears before swtpm listens on it.
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock
		}
		select {
		case err := <-exited:
			t.Fatalf("swtpm exited: %v: %s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("swtpm made no socket %s in 10s: %s", sock, out.String())
		}
	}
}

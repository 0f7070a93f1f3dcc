package ostest

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

// guestTPM is a machine's TPM2: a software TPM (swtpm) on the host that
// qemu's TPM emulator backend drives through a tpm-tis device, the guest
// kernel's tpm_tis (built into Debian's cloud kernel) making /dev/tpmrm0
// of it. Its state directory is the machine's, so every boot sees the
// same TPM (the same owner seed: what one boot sealed the next unseals);
// each boot has its own swtpm process, started by Start before it.
type guestTPM struct {
	t    testing.TB
	bin  string
	dir  string // the TPM's state
	sock string // swtpm's control socket, qemu's chardev
	stop func()
}

// addTPM gives m a TPM2 for every boot; the last swtpm is stopped when
// the test ends.
func addTPM(t testing.TB, m *Machine) *guestTPM {
	t.Helper()
	g := &guestTPM{t: t, bin: testtool.Need(t, "swtpm", "swtpm")[0]}
	// A unix socket's path has room for 107 bytes: not under m.Dir,
	// whose TMPDIR may be long.
	dir, err := os.MkdirTemp("", "ostpm")
	if err != nil {
		t.Fatal(err)
	}
	g.dir, g.sock = filepath.Join(dir, "state"), filepath.Join(dir, "ctrl")
	if err := os.Mkdir(g.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if g.stop != nil {
			g.stop()
		}
		os.RemoveAll(dir)
	})
	m.QemuArgs = append(m.QemuArgs, "-chardev", "socket,id=chrtpm,path="+g.sock,
		"-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0")
	return g
}

// Start runs a new swtpm on the TPM's state for the next boot, the last
// one (whose qemu has exited) stopped first: swtpm keeps the permanent
// state (seeds, NV) in its directory as it changes.
func (g *guestTPM) Start() {
	t := g.t
	t.Helper()
	if g.stop != nil {
		g.stop()
	}
	os.Remove(g.sock)
	var out bytes.Buffer
	cmd := exec.Command(g.bin, "socket", "--tpm2", "--tpmstate", "dir="+g.dir,
		"--ctrl", "type=unixio,path="+g.sock, "--log", "level=0")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start swtpm: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	g.stop = func() {
		// SIGTERM: swtpm saves its state and exits.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			err = <-exited
		}
		if t.Failed() {
			// What it printed says more when the guest's TPM failed.
			t.Logf("swtpm (%v):\n%s", err, out.String())
		}
		g.stop = nil
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The socket file appears before swtpm listens on it.
		if c, err := net.Dial("unix", g.sock); err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			g.stop = nil
			t.Fatalf("swtpm exited: %v: %s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.stop()
			t.Fatalf("swtpm made no socket %s in 10s: %s", g.sock, out.String())
		}
	}
}

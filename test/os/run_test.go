package ostest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The guest's console lines the harness understands (guest/lib.sh):
const (
	markLog  = "OSTEST-LOG "
	markKV   = "OSTEST-KV "
	markFail = "OSTEST-FAIL "
	markDone = "OSTEST-DONE "
)

// Run is one boot of a Machine: qemu running until the guest powers off
// or reboots (-no-reboot: qemu exits), or Kill cuts its power.
type Run struct {
	m       *Machine
	n       int    // which boot of the machine
	Console string // the console log file
	cmd     *exec.Cmd
	monSock string
	exited  chan struct{} // closed when qemu has exited and the console is read
	waitErr error
	started time.Time
	ended   time.Time

	mu    sync.Mutex // guards what the console reader writes
	cond  *sync.Cond
	lines []string
	kv    map[string]string
	fails []string

	stdin io.WriteCloser // the console's input
	seed  string         // the seed disk it booted with

	monMu sync.Mutex // guards the monitor connection
	mon   net.Conn
	monR  *bufio.Reader
}

// Boot starts qemu on the machine's disk, with the files added since the
// last boot on a seed disk. At most one machine per CPU, and one more,
// of the test binary run at once; Boot waits for a slot. The console log is
// copied into the test's output when the test fails; OSTEST-LOG lines go
// to the test's log as they come.
func (m *Machine) Boot(ctx context.Context) *Run {
	m.t.Helper()
	seed, err := m.seed()
	if err != nil {
		m.t.Fatal(err)
	}
	resume := m.resume
	m.resume = nil
	if resume != nil {
		if seed != "" {
			m.t.Fatalf("boot %s: files added to a machine that resumes a snapshot: they are for its next boot", m.Name)
		}
		seed = resume.seed
	}
	select {
	case m.img.slots <- struct{}{}:
	case <-ctx.Done():
		m.t.Fatalf("boot %s: no VM slot: %v", m.Name, ctx.Err())
	}
	m.boots++
	r := &Run{m: m, n: m.boots, kv: map[string]string{}, exited: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	r.Console = filepath.Join(m.Dir, fmt.Sprintf("console-%d.log", r.n))
	// A unix socket's path has room for 107 bytes: not under a long TMPDIR.
	monDir, err := os.MkdirTemp("/tmp", "ostest-mon")
	if err != nil {
		<-m.img.slots
		m.t.Fatal(err)
	}
	r.monSock = filepath.Join(monDir, "mon")
	args := m.qemuArgs(seed, r.monSock)
	if resume != nil {
		args = append(args, "-loadvm", resume.name)
	}
	logf, err := os.Create(r.Console)
	if err != nil {
		<-m.img.slots
		m.t.Fatal(err)
	}
	fmt.Fprintf(logf, "# qemu-system-x86_64 %s\n", strings.Join(args, " "))
	// Not CommandContext: a test decides when a run ends (Kill, Wait);
	// Pdeathsig takes qemu along when the test binary dies.
	r.cmd = exec.Command("qemu-system-x86_64", args...)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := r.cmd.StdoutPipe()
	if err == nil {
		r.stdin, err = r.cmd.StdinPipe()
	}
	if err == nil {
		r.cmd.Stderr = r.cmd.Stdout
		err = r.cmd.Start()
	}
	if err != nil {
		logf.Close()
		<-m.img.slots
		m.t.Fatalf("start qemu: %v", err)
	}
	r.started = time.Now()
	r.seed = seed
	m.t.Logf("%s: boot %d started (console %s)", m.Name, r.n, r.Console)
	if resume != nil {
		// The saved guest waits for a line on its console (Snapshot).
		if _, err := io.WriteString(r.stdin, "go\n"); err != nil {
			m.t.Errorf("%s: resume: %v", m.Name, err)
		}
	}
	go r.read(out, logf, monDir)
	m.t.Cleanup(func() {
		r.Kill()
		r.monMu.Lock()
		if r.mon != nil {
			r.mon.Close()
		}
		r.monMu.Unlock()
		if m.t.Failed() {
			m.t.Logf("%s boot %d console (%s), last lines:\n%s", m.Name, r.n, r.Console, r.Tail(150))
		}
	})
	return r
}

// read follows the console until qemu exits, then releases the VM slot.
func (r *Run) read(out io.Reader, logf *os.File, monDir string) {
	defer close(r.exited)
	defer os.RemoveAll(monDir)
	defer func() { <-r.m.img.slots }()
	defer logf.Close()
	sc := bufio.NewScanner(io.TeeReader(out, logf))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		r.feed(strings.TrimRight(sc.Text(), "\r"))
	}
	err := r.cmd.Wait()
	r.mu.Lock()
	r.waitErr, r.ended = err, time.Now()
	r.cond.Broadcast()
	r.mu.Unlock()
	if ps := r.cmd.ProcessState; ps != nil {
		cpu, wall := ps.UserTime()+ps.SystemTime(), r.ended.Sub(r.started)
		r.m.img.cpu.add(r.m.t.Name(), cpu, wall)
		r.m.t.Logf("%s: boot %d ended: qemu ran %.1f s, CPU %.1f s", r.m.Name, r.n, wall.Seconds(), cpu.Seconds())
	}
}

// feed takes one console line. Kernel output can share a line with the
// guest's, so marks are looked for anywhere in it.
func (r *Run) feed(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, line)
	defer r.cond.Broadcast()
	i := strings.Index(line, "OSTEST-")
	if i < 0 {
		return
	}
	msg := line[i:]
	switch {
	case strings.HasPrefix(msg, markLog):
		r.m.t.Logf("%s/%d: %s", r.m.Name, r.n, strings.TrimPrefix(msg, markLog))
	case strings.HasPrefix(msg, markKV):
		k, v, _ := strings.Cut(strings.TrimPrefix(msg, markKV), " ")
		r.kv[k] = v
	case strings.HasPrefix(msg, markFail):
		r.fails = append(r.fails, strings.TrimPrefix(msg, markFail))
	}
}

// WaitFor waits until a console line contains s and returns that line.
// It fails t if qemu exits first or timeout passes (the machine's test
// then shows the console's tail).
func (r *Run) WaitFor(t testing.TB, s string, timeout time.Duration) string {
	t.Helper()
	line, err := r.waitLine(s, timeout)
	if err != nil {
		t.Fatalf("%s boot %d: %v", r.m.Name, r.n, err)
	}
	return line
}

// waitLine is WaitFor's search, from the first line.
func (r *Run) waitLine(s string, timeout time.Duration) (string, error) {
	timer := time.AfterFunc(timeout, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	r.mu.Lock()
	defer r.mu.Unlock()
	for seen := 0; ; {
		for ; seen < len(r.lines); seen++ {
			if strings.Contains(r.lines[seen], s) {
				return r.lines[seen], nil
			}
		}
		if !r.ended.IsZero() {
			return "", fmt.Errorf("qemu exited (%v) before the console said %q", r.waitErr, s)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no console line with %q in %s", s, timeout)
		}
		r.cond.Wait()
	}
}

// WaitDone waits for the guest's "OSTEST-DONE step" (guest/lib.sh done_step).
func (r *Run) WaitDone(t testing.TB, step string, timeout time.Duration) {
	t.Helper()
	if _, err := r.waitLine(markDone+step, timeout); err != nil {
		t.Fatalf("%s boot %d: step %s: %v", r.m.Name, r.n, step, err)
	}
}

// Finish waits for the guest's last step and then cuts the power: a
// boot whose checks are all done has nothing left to show, and a clean
// poweroff costs seconds of emulated CPU at every test's end (the
// shutdown itself is TestLifecycle's). Not for a boot whose disks a
// later boot or the host reads: those end with a poweroff (Wait).
func (r *Run) Finish(t testing.TB, step string, timeout time.Duration) {
	t.Helper()
	r.WaitDone(t, step, timeout)
	r.Kill()
}

// Wait waits for qemu to exit by itself (the guest powered off or
// rebooted) and returns how long the boot ran. It fails the test if
// that takes longer than timeout, killing qemu.
func (r *Run) Wait(t testing.TB, timeout time.Duration) time.Duration {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(timeout):
		r.Kill()
		t.Fatalf("%s boot %d: qemu still running after %s; killed", r.m.Name, r.n, timeout)
	}
	if r.waitErr != nil {
		t.Errorf("%s boot %d: qemu: %v", r.m.Name, r.n, r.waitErr)
	}
	return r.ended.Sub(r.started)
}

// Kill cuts the guest's power: SIGKILL to qemu, which writes nothing
// more to the disks. What the guest had flushed is on them (cache=none).
// Killing a run that has ended does nothing.
func (r *Run) Kill() {
	select {
	case <-r.exited:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
}

// Monitor sends one HMP command ("system_powerdown", "info block",
// "device_add ...") and returns its output.
func (r *Run) Monitor(cmd string) (string, error) {
	r.monMu.Lock()
	defer r.monMu.Unlock()
	if r.mon == nil {
		c, err := r.dialMonitor()
		if err != nil {
			return "", err
		}
		r.mon, r.monR = c, bufio.NewReader(c)
		if _, err := r.readPrompt(); err != nil { // the greeting
			return "", err
		}
	}
	if _, err := io.WriteString(r.mon, cmd+"\n"); err != nil {
		return "", fmt.Errorf("monitor: %w", err)
	}
	out, err := r.readPrompt()
	if err != nil {
		return out, err
	}
	// The first line is the command, echoed.
	if _, rest, ok := strings.Cut(out, "\n"); ok {
		return strings.TrimSpace(rest), nil
	}
	return "", nil
}

// dialMonitor connects to the monitor, which qemu makes a moment after
// it starts.
func (r *Run) dialMonitor() (net.Conn, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("unix", r.monSock, 10*time.Second)
		if err == nil {
			return c, nil
		}
		select {
		case <-r.exited:
			return nil, fmt.Errorf("monitor: qemu exited: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("monitor: %w", err)
		}
	}
}

// readPrompt reads the monitor's output up to its next "(qemu) " prompt,
// without the terminal's cursor moves.
func (r *Run) readPrompt() (string, error) {
	_ = r.mon.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	for {
		c, err := r.monR.ReadByte()
		if err != nil {
			return b.String(), fmt.Errorf("monitor: %w", err)
		}
		b.WriteByte(c)
		if strings.HasSuffix(b.String(), "(qemu) ") {
			s := ansiEscape.ReplaceAllString(strings.TrimSuffix(b.String(), "(qemu) "), "")
			return strings.ReplaceAll(s, "\r", ""), nil
		}
	}
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// KV is a value the guest reported with "kv KEY VALUE" ("" if none).
func (r *Run) KV(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kv[key]
}

// Failures are the guest's "fail" lines so far.
func (r *Run) Failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.fails...)
}

// CheckGuest fails t with each of the guest's "fail" lines.
func (r *Run) CheckGuest(t testing.TB) {
	t.Helper()
	for _, f := range r.Failures() {
		t.Errorf("%s boot %d: %s", r.m.Name, r.n, f)
	}
}

// Lines are the console lines that contain s.
func (r *Run) Lines(s string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// Tail is the console's last n lines.
func (r *Run) Tail(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return lastN(strings.Join(r.lines, "\n"), n)
}

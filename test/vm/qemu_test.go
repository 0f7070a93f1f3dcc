package vm

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The guest speaks to the harness in console lines (see guest/init):
//
//	VMTEST-BOOTED <uptime>
//	VMTEST-NEXT
//	VMTEST-BEGIN <scenario>
//	VMTEST-RESULT <scenario> PASS|FAIL <seconds> [detail]
//	VMTEST-DONE
//	VMTEST-HOST <monitor command>
//
// Anything else between BEGIN and RESULT belongs to that scenario.
// VMTEST-NEXT asks for the next scenario: the host answers on the
// console's input with NAME:TIMEOUT, or - when none is left.
// VMTEST-HOST asks the host to run an HMP command on the VM's monitor
// (block_resize, drive_add, device_add: what happens to a real server's
// disks from outside); the guest sees it done by polling for its effect.
const (
	markBooted = "VMTEST-BOOTED"
	markNext   = "VMTEST-NEXT"
	markBegin  = "VMTEST-BEGIN "
	markResult = "VMTEST-RESULT "
	markDone   = "VMTEST-DONE"
	markHost   = "VMTEST-HOST "
)

// result is one scenario's outcome as the guest reported it.
type result struct {
	name    string
	passed  bool
	seconds float64
	detail  string
	lines   []string // console lines between BEGIN and RESULT
	ended   bool     // a RESULT line was seen
}

// console follows a VM's console output line by line.
type console struct {
	cpu     time.Duration // qemu's user and system time, once it exited
	booted  bool
	done    bool
	results map[string]*result
	cur     *result
	// onResult is called as each scenario ends (for live progress).
	onResult func(*result)
	// onHost runs a VMTEST-HOST request.
	onHost func(cmd string)
	// onNext answers a VMTEST-NEXT; onDone ends the VM.
	onNext, onDone func()
}

func newConsole() *console { return &console{results: map[string]*result{}} }

// feed takes one console line. Kernel output can share a line with the
// guest's (the serial console interleaves), so markers are searched for
// anywhere in it.
func (c *console) feed(line string) {
	line = strings.TrimRight(line, "\r")
	i := strings.Index(line, "VMTEST-")
	if i < 0 {
		if c.cur != nil {
			c.cur.lines = append(c.cur.lines, line)
		}
		return
	}
	msg := line[i:]
	switch {
	case strings.HasPrefix(msg, markBooted):
		c.booted = true
	case strings.HasPrefix(msg, markDone):
		c.done = true
		if c.onDone != nil {
			c.onDone()
		}
	case strings.HasPrefix(msg, markNext):
		if c.onNext != nil {
			c.onNext()
		}
	case strings.HasPrefix(msg, markHost):
		if c.cur != nil {
			c.cur.lines = append(c.cur.lines, line)
		}
		if c.onHost != nil {
			c.onHost(strings.TrimSpace(strings.TrimPrefix(msg, markHost)))
		}
	case strings.HasPrefix(msg, markBegin):
		name := strings.TrimSpace(strings.TrimPrefix(msg, markBegin))
		c.cur = &result{name: name}
		c.results[name] = c.cur
	case strings.HasPrefix(msg, markResult):
		r, ok := parseResult(strings.TrimPrefix(msg, markResult))
		if !ok {
			if c.cur != nil {
				c.cur.lines = append(c.cur.lines, line)
			}
			return
		}
		if prev := c.results[r.name]; prev != nil {
			r.lines = prev.lines
		}
		c.results[r.name] = r
		c.cur = nil
		if c.onResult != nil {
			c.onResult(r)
		}
	default:
		if c.cur != nil {
			c.cur.lines = append(c.cur.lines, line)
		}
	}
}

// parseResult reads "<scenario> PASS|FAIL <seconds> [detail]".
func parseResult(s string) (*result, bool) {
	f := strings.SplitN(strings.TrimSpace(s), " ", 4)
	if len(f) < 3 || (f[1] != "PASS" && f[1] != "FAIL") {
		return nil, false
	}
	secs, err := strconv.ParseFloat(f[2], 64)
	if err != nil {
		return nil, false
	}
	r := &result{name: f[0], passed: f[1] == "PASS", seconds: secs, ended: true}
	if len(f) == 4 {
		r.detail = f[3]
	}
	return r, true
}

// vmPlan is one VM boot; it runs the scenarios q hands it.
type vmPlan struct {
	id    int
	disks bool
	tpm   bool   // attach a software TPM2
	log   string // console log file
}

// bootConfig is what every boot shares.
type bootConfig struct {
	kernel  string
	initrd  string
	accel   string
	smp     int
	memMB   int
	diskDir string
}

// bootAllowance covers qemu start, kernel boot and module loading, with
// room for a loaded CI machine. A VM may end up running every scenario
// (when the others die), so its limit is bootAllowance plus each one's
// timeout and resetAllowance for the reset after it.
const (
	bootAllowance  = 2 * time.Minute
	resetAllowance = 15 * time.Second
)

// boot runs one VM to its end, handing it scenarios from q as it asks,
// and returns what its console said. The console is written to plan.log
// as it comes.
func boot(ctx context.Context, cfg bootConfig, plan vmPlan, q *queue, onResult func(*result)) (*console, error) {
	limit := bootAllowance + q.budget(resetAllowance)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	// no_timer_check: on a busy host the kernel's check that the timer
	// interrupt comes through the IO-APIC can miss its window and panic
	// the boot ("IO-APIC + timer doesn't work!").
	args := []string{
		"-accel", cfg.accel, "-cpu", cpuFor(cfg.accel), "-m", strconv.Itoa(cfg.memMB), "-smp", strconv.Itoa(cfg.smp),
		"-nodefaults", "-nographic", "-no-reboot", "-serial", "stdio",
		"-uuid", fmt.Sprintf("6f0c2a3e-5b1d-4c8e-9a7f-%012x", plan.id),
		"-kernel", cfg.kernel, "-initrd", cfg.initrd,
		"-append", "console=ttyS0 panic=-1 loglevel=4 mitigations=off no_timer_check vmtest.vm=" + strconv.Itoa(plan.id) +
			tpmCmdline(plan.tpm),
	}
	monSock := filepath.Join(cfg.diskDir, fmt.Sprintf("vm%d.mon", plan.id))
	if len(monSock) > 100 {
		// A unix socket's path has room for 107 bytes; a long TMPDIR
		// would keep qemu from starting.
		d, err := os.MkdirTemp("/tmp", "vmmon")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		monSock = filepath.Join(d, fmt.Sprintf("vm%d.mon", plan.id))
	}
	args = append(args, "-monitor", "unix:"+monSock+",server=on,wait=off")
	if plan.disks {
		d, err := diskArgs(cfg.diskDir, plan.id)
		if err != nil {
			return nil, err
		}
		args = append(args, d...)
	}
	if plan.tpm {
		sock, stop, err := startSwtpm(ctx, plan.id)
		if err != nil {
			return nil, err
		}
		defer stop()
		args = append(args, "-chardev", "socket,id=chrtpm,path="+sock,
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0")
	}
	logf, err := os.Create(plan.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "# qemu-system-x86_64 %s\n", strings.Join(args, " "))
	lw := &lockedWriter{w: logf}

	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.WaitDelay = 5 * time.Second
	// A test binary that dies (a panic, a signal) takes its VMs along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	con := newConsole()
	con.onResult = onResult
	mon := &monitor{sock: monSock, diskDir: cfg.diskDir, id: plan.id, log: lw}
	defer mon.close()
	con.onHost = mon.run
	con.onNext = func() {
		answer := "-"
		if s, ok := q.take(plan.id); ok {
			answer = fmt.Sprintf("%s:%d", s.name, int(s.timeout.Seconds()))
		}
		fmt.Fprintf(lw, "# host: next %s\n", answer)
		if _, err := io.WriteString(in, answer+"\n"); err != nil {
			fmt.Fprintf(lw, "# host: console write: %v\n", err)
		}
	}
	// The guest has nothing left to do once it said so; its own
	// power-off is only the fallback.
	con.onDone = func() { mon.run("quit") }
	sc := bufio.NewScanner(io.TeeReader(out, lw))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		con.feed(sc.Text())
	}
	werr := cmd.Wait()
	if cmd.ProcessState != nil {
		con.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	switch {
	case ctx.Err() != nil:
		return con, fmt.Errorf("VM %d killed after %s (the boot allowance plus every scenario's timeout)", plan.id, limit)
	case !con.booted:
		return con, fmt.Errorf("VM %d never reached its /init (qemu: %v)", plan.id, werr)
	case !con.done:
		return con, fmt.Errorf("VM %d ended before it said %s (qemu: %v)", plan.id, markDone, werr)
	}
	return con, nil
}

// tpmCmdline has the kernel probe the TIS TPM at its fixed address:
// booted with -kernel, the guest finds no ACPI entry for it.
func tpmCmdline(tpm bool) string {
	if !tpm {
		return ""
	}
	return " tpm_tis.force=1 tpm_tis.interrupts=0"
}

// startSwtpm runs a software TPM2 with a fresh state for one VM boot and
// returns its control socket, which qemu's TPM emulator backend drives
// (it powers the TPM on; the guest kernel sends TPM2_Startup). stop ends
// it and removes its state.
func startSwtpm(ctx context.Context, id int) (string, func(), error) {
	// A unix socket's path has room for 107 bytes: not under a long
	// TMPDIR.
	dir, err := os.MkdirTemp("/tmp", "vmtpm")
	if err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, fmt.Sprintf("vm%d.tpm", id))
	cmd := exec.CommandContext(ctx, "swtpm", "socket", "--tpm2", "--tpmstate", "dir="+dir,
		"--ctrl", "type=unixio,path="+sock, "--log", "level=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("start swtpm: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		// Waits for the reaping; the error is the kill's, or one the
		// start-up loop below has reported already.
		<-exited //nolint:errcheck // a receive to wait on, not a call whose failure goes unseen
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The socket file appears before swtpm listens on it.
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock, stop, nil
		}
		select {
		case err := <-exited:
			exited <- err
			stop()
			return "", nil, fmt.Errorf("swtpm exited: %v: %s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("swtpm made no socket %s in 10s", sock)
		}
	}
}

// monitor sends the guest's VMTEST-HOST requests to qemu's HMP monitor.
// What qemu answers is copied into the console log, which the console
// reader writes too (hence a lockedWriter).
type monitor struct {
	sock    string
	diskDir string
	id      int
	log     io.Writer
	conn    net.Conn
	mu      sync.Mutex // guards conn
	done    chan struct{}
}

// run sends one command; "@DISKS@/" in it names the VM's disk files
// ("@DISKS@/hot.img" is this VM's vmN-hot.img).
func (m *monitor) run(cmd string) {
	cmd = strings.ReplaceAll(cmd, "@DISKS@/", filepath.Join(m.diskDir, fmt.Sprintf("vm%d-", m.id)))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil {
		c, err := net.DialTimeout("unix", m.sock, 10*time.Second)
		if err != nil {
			fmt.Fprintf(m.log, "# host: monitor %s: %v\n", m.sock, err)
			return
		}
		m.conn = c
		m.done = make(chan struct{})
		go func() {
			defer close(m.done)
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				if l := hmpLine(sc.Text()); l != "" {
					fmt.Fprintf(m.log, "# monitor: %s\n", l)
				}
			}
		}()
	}
	fmt.Fprintf(m.log, "# host: %s\n", cmd)
	if _, err := io.WriteString(m.conn, cmd+"\n"); err != nil {
		fmt.Fprintf(m.log, "# host: monitor write: %v\n", err)
	}
}

// close ends the connection and waits for its reader.
func (m *monitor) close() {
	m.mu.Lock()
	c, done := m.conn, m.done
	m.mu.Unlock()
	if c != nil {
		c.Close()
		<-done
	}
}

// hmpLine is what a line of the HMP monitor's output says: the monitor
// echoes each typed character by redrawing the line between cursor
// moves (ESC [ ... letter), so the last text between them is the line as
// typed; prompts are dropped.
func hmpLine(l string) string {
	segs := ansiEscape.Split(strings.TrimRight(l, "\r"), -1)
	last := ""
	for _, s := range segs {
		if s != "" {
			last = s
		}
	}
	return strings.TrimSpace(strings.ReplaceAll(last, "(qemu)", ""))
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// cpuFor: under TCG the plain qemu64 model, not max: emulating max's
// extensions made a boot of test/os about a fifth slower (TestPowerCut's
// first cut: 106 s against 86 s, the two side by side).
func cpuFor(accel string) string {
	if accel == "kvm" {
		return "host"
	}
	return "qemu64"
}

// diskArgs gives a VM five blank local disks: one found by its serial
// (virtio-blk), one by its WWN (a SCSI disk on virtio-scsi), one
// (virtio-blk, serial VOLLUKS1) the luks scenario encrypts, and an NVMe
// disk of its own size (96 MiB, serial VOLNVME1) the partition scenario
// selects by an expression and partitions, and a virtio-blk disk (serial
// VOLGROW1) the growdisk scenario resizes through the monitor. A sixth
// file waits for the hotdisk scenario to hot-add it.
func diskArgs(dir string, id int) ([]string, error) {
	var files []string
	for _, n := range []string{"serial", "wwn", "luks", "nvme", "grow", "hot"} {
		p := filepath.Join(dir, fmt.Sprintf("vm%d-%s.img", id, n))
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		size := int64(64 << 20)
		switch n {
		case "nvme":
			size = 96 << 20
		case "hot":
			size = 48 << 20 // a size no other disk has: hotdisk checks it got this one
		}
		err = f.Truncate(size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		files = append(files, p)
	}
	return []string{
		"-drive", "file=" + files[0] + ",if=none,id=d1,format=raw",
		"-device", "virtio-blk-pci,drive=d1,serial=VOLSERIAL1",
		"-device", "virtio-scsi-pci,id=scsi0",
		"-drive", "file=" + files[1] + ",if=none,id=d2,format=raw",
		"-device", "scsi-hd,bus=scsi0.0,drive=d2,wwn=0x5000c500aaaabbbb,serial=VOLSERIAL2",
		"-drive", "file=" + files[2] + ",if=none,id=d3,format=raw",
		"-device", "virtio-blk-pci,drive=d3,serial=VOLLUKS1",
		"-drive", "file=" + files[3] + ",if=none,id=d4,format=raw",
		"-device", "nvme,drive=d4,serial=VOLNVME1",
		"-drive", "file=" + files[4] + ",if=none,id=grow1,format=raw",
		"-device", "virtio-blk-pci,drive=grow1,serial=VOLGROW1",
		// files[5] (vmN-hot.img) is attached by the hotdisk scenario
		// through the monitor.
	}, nil
}

// tail is the last n lines of a file, for a failure message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func TestConsoleParsing(t *testing.T) {
	var ended, asked []string
	c := newConsole()
	c.onResult = func(r *result) { ended = append(ended, r.name) }
	c.onHost = func(cmd string) { asked = append(asked, cmd) }
	for _, l := range []string{
		"Booting from ROM..\x1b[2JVMTEST-BOOTED 3.10\r",
		"VMTEST-BEGIN smoke",
		"VMTEST-LOG [3.2] nvmet up",
		"[    4.0] virtio_blk virtio3: [vdc] new size VMTEST-HOST block_resize grow1 160M\r",
		"[    4.1] nvme nvme0: new ctrl",
		"VMTEST-RESULT smoke PASS 1.75",
		"stray kernel line between scenarios",
		"VMTEST-BEGIN nvme",
		"VMTEST-FAIL volumes not Ready",
		"VMTEST-RESULT nvme FAIL 61.00 volumes not Ready: nv1: Attaching",
		"VMTEST-BEGIN crash",
		"the VM died here",
	} {
		c.feed(l)
	}
	if !c.booted || c.done {
		t.Errorf("booted=%v done=%v, want true false", c.booted, c.done)
	}
	smoke := c.results["smoke"]
	if smoke == nil || !smoke.passed || smoke.seconds != 1.75 || len(smoke.lines) != 3 {
		t.Errorf("smoke = %+v, want a pass in 1.75 s with its 3 lines", smoke)
	}
	if strings.Join(asked, ";") != "block_resize grow1 160M" {
		t.Errorf("host requests: %q, want the one block_resize", asked)
	}
	nv := c.results["nvme"]
	if nv == nil || nv.passed || nv.detail != "volumes not Ready: nv1: Attaching" || len(nv.lines) != 1 {
		t.Errorf("nvme = %+v, want a failure with its detail and 1 line", nv)
	}
	if cr := c.results["crash"]; cr == nil || cr.ended || len(cr.lines) != 1 {
		t.Errorf("crash = %+v, want an unfinished scenario holding its line", cr)
	}
	if strings.Join(ended, ",") != "smoke,nvme" {
		t.Errorf("results reported live: %v, want smoke,nvme", ended)
	}
	for _, bad := range []string{"x", "nvme MAYBE 1", "nvme PASS soon"} {
		if _, ok := parseResult(bad); ok {
			t.Errorf("parseResult(%q) accepted a malformed line", bad)
		}
	}
	for in, want := range map[string]string{
		"QEMU 7.2.22 monitor - type 'help' for more information\r": "QEMU 7.2.22 monitor - type 'help' for more information",
		"(qemu) ": "",
		"\x1b[D\x1b[Dblock_re\x1b[K\x1b[D\x1b[Dblock_resize grow1 160M\x1b[K\r": "block_resize grow1 160M",
		"Error: Device 'nope' not found\r":                                      "Error: Device 'nope' not found",
	} {
		if got := hmpLine(in); got != want {
			t.Errorf("hmpLine(%q) = %q, want %q", in, got, want)
		}
	}
	var nexts, dones int
	c.onNext = func() { nexts++ }
	c.onDone = func() { dones++ }
	c.feed("[   5.2] kworker VMTEST-NEXT\r")
	c.feed("VMTEST-DONE")
	if !c.done || nexts != 1 || dones != 1 {
		t.Errorf("done=%v, %d VMTEST-NEXT and %d VMTEST-DONE answered; want true, 1, 1", c.done, nexts, dones)
	}
}

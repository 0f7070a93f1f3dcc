// Package e2e runs the real volumed binary against the real kernel: loop
// devices, mkfs, mounts and SIGKILLs, inside a private mount namespace.
package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/loop"
	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/test/agenttest"
)

// volumedBin is volumed built with crash points compiled in (and the
// race detector, when the tests run with -race). helperBin is a copy of
// this test binary that an unprivileged user can run (see runHelper).
var volumedBin, helperBin string

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h, os.Args[1:]))
	}
	if !testns.Inside() {
		testns.Main(m)
		return
	}
	dir, err := os.MkdirTemp("", "volumed-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		// Reachable by anyone: some tests run the binaries as nobody.
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		bin, err := agenttest.Build(dir, raceEnabled, "crashpoints")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		volumedBin = bin
		helperBin = filepath.Join(dir, "e2e-helper")
		if err := copyExecutable(helperBin); err != nil {
			fmt.Fprintln(os.Stderr, "copy the test binary for helpers:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// copyExecutable copies the running test binary to dst (mode 0755): the
// go tool builds it in a directory only root can enter.
func copyExecutable(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// env is one agent's world: its manifest dir, state dir, images and
// targets, all under one temp dir.
type env struct {
	t      *testing.T
	dir    string
	config string
	state  string
	socket string
	images string
	mnt    string
	resync string
	// extraArgs are added to `volumed run`.
	extraArgs []string

	mu   sync.Mutex
	proc *agenttest.Process // the running agent, nil if none
	last *agenttest.Process // the agent started last, running or not
	logs *agenttest.Buffer  // every run's output, in order
	exit error              // how the last run that waitExit saw ended
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir is 0700 under a 1777 /tmp; manifests must sit in root-owned,
	// non-group-writable dirs, which these are.
	e := &env{
		t: t, dir: dir,
		config: filepath.Join(dir, "volumes.d"),
		state:  filepath.Join(dir, "state"),
		socket: filepath.Join(dir, "volumed.sock"),
		images: filepath.Join(dir, "images"),
		mnt:    filepath.Join(dir, "mnt"),
		resync: "60s",
	}
	for _, d := range []string{e.config, e.images, e.mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(e.cleanup)
	return e
}

// cleanup kills the agent, unmounts everything under the temp dir and
// detaches every loop device backed by a file in it, even after a failure.
func (e *env) cleanup() {
	e.kill()
	agenttest.Cleanup(e.dir, e.t.Logf)
	// A race-built agent reports a race on its stderr and runs on; it
	// would otherwise go unseen, as most tests end the agent by a signal.
	if log := e.logText(); strings.Contains(log, "WARNING: DATA RACE") {
		e.t.Errorf("the agent has a data race:\n%s", log)
	} else if e.t.Failed() {
		e.t.Logf("agent log:\n%s", log)
	}
}

func (e *env) logText() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.logs == nil {
		return ""
	}
	return e.logs.String()
}

// start runs the agent; extraEnv adds e.g. a crash point.
func (e *env) start(extraEnv ...string) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc != nil {
		e.t.Fatal("agent already running")
	}
	args := []string{"run", "--config-dir", e.config, "--state-dir", e.state, "--socket", e.socket,
		"--metrics-address", "", "--resync", e.resync, "--log-level", "debug"}
	args = append(args, e.extraArgs...)
	if e.logs == nil {
		e.logs = &agenttest.Buffer{}
	}
	fmt.Fprintf(e.logs, "---- start %v\n", extraEnv)
	p, err := agenttest.Start(e.logs, volumedBin, args, extraEnv...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.proc, e.last = p, p
}

// running returns the running agent, or nil.
func (e *env) running() *agenttest.Process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proc
}

// forget records that the agent is no longer running.
func (e *env) forget() {
	e.mu.Lock()
	e.proc = nil
	e.mu.Unlock()
}

// limitFiles sets the running agent's RLIMIT_NOFILE (soft and hard).
func (e *env) limitFiles(n uint64) {
	e.t.Helper()
	p := e.running()
	if p == nil {
		e.t.Fatal("agent not running")
	}
	if err := unix.Prlimit(p.Pid(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
		e.t.Fatalf("limit the agent's open files: %v", err)
	}
}

func (e *env) signal(sig syscall.Signal) {
	p := e.running()
	if p == nil {
		return
	}
	p.Signal(sig)
	e.forget()
}

func (e *env) kill() { e.signal(syscall.SIGKILL) }
func (e *env) stop() { e.signal(syscall.SIGTERM) }

// waitExit waits for the agent to die on its own (a crash point) and
// reports whether it died of SIGKILL.
func (e *env) waitExit(timeout time.Duration) bool {
	e.t.Helper()
	e.mu.Lock()
	p := e.last
	e.mu.Unlock()
	if p == nil {
		e.t.Fatal("agent never started")
	}
	exited, killed := p.Wait(timeout)
	if !exited {
		e.t.Fatalf("agent did not exit within %s", timeout)
	}
	e.exit = p.Err()
	e.forget()
	return killed
}

// formattedImages makes the 64 MiB images of the named volumes, each
// holding an ext4 already (so mounting them formats nothing).
func (e *env) formattedImages(names ...string) {
	e.t.Helper()
	for _, v := range names {
		img := e.image(v+".img", 64<<20)
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
			e.t.Fatalf("mkfs.ext4: %v: %s", err, out)
		}
	}
}

func (e *env) image(name string, size int64) string {
	e.t.Helper()
	p := filepath.Join(e.images, name)
	f, err := os.Create(p)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		e.t.Fatal(err)
	}
	f.Close()
	return p
}

func (e *env) write(file, content string) {
	e.t.Helper()
	p := filepath.Join(e.config, file)
	tmp := p + ".tmp~"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) remove(file string) {
	e.t.Helper()
	if err := os.Remove(filepath.Join(e.config, file)); err != nil {
		e.t.Fatal(err)
	}
}

// volume writes a loop volume manifest named name.yaml.
func (e *env) volume(name, fstype string, size string, targets ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: volumed/v1\nkind: Volume\nmetadata:\n  name: %s\nspec:\n  source:\n    loop:\n      file: %s\n      create: { size: %s }\n  filesystem:\n    type: %s\n", name, filepath.Join(e.images, name+".img"), size, fstype)
	if len(targets) > 0 {
		b.WriteString("  mounts:\n")
		for _, t := range targets {
			ro := strings.HasSuffix(t, ":ro")
			t = strings.TrimSuffix(t, ":ro")
			fmt.Fprintf(&b, "    - path: %s\n", filepath.Join(e.mnt, t))
			if ro {
				b.WriteString("      readOnly: true\n")
			}
		}
	}
	e.write(name+".yaml", b.String())
	return b.String()
}

func (e *env) target(t string) string { return filepath.Join(e.mnt, t) }

func (e *env) status() (*api.Status, error) {
	return agenttest.Status(context.Background(), e.socket)
}

// waitFor polls the agent's status until cond holds. The deadline is a
// failure bound, not a performance assertion.
func (e *env) waitFor(what string, cond func(*api.Status) bool) *api.Status {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := agenttest.WaitStatus(ctx, e.socket, cond)
	if err != nil {
		e.t.Fatalf("timed out waiting for %s; last status %s (%v)", what, dumpStatus(st), err)
	}
	return st
}

func dumpStatus(st *api.Status) string { return agenttest.Dump(st) }

func find(st *api.Status, name string) *api.Volume { return agenttest.Find(st, name) }

func (e *env) waitReady(names ...string) *api.Status {
	e.t.Helper()
	return e.waitFor("volumes "+strings.Join(names, ",")+" Ready", func(st *api.Status) bool {
		for _, n := range names {
			v := find(st, n)
			if v == nil || v.Phase != api.PhaseReady {
				return false
			}
		}
		return true
	})
}

// containsAll reports whether s holds every one of words.
func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

func (e *env) waitPhase(name, phase string) *api.Volume {
	e.t.Helper()
	st := e.waitFor(name+" "+phase, func(st *api.Status) bool {
		v := find(st, name)
		return v != nil && v.Phase == phase
	})
	return find(st, name)
}

func (e *env) waitGone(name string) {
	e.t.Helper()
	e.waitFor(name+" torn down", func(st *api.Status) bool { return find(st, name) == nil && st.Settled })
}

// mounts returns every mount under the env's dir, by mount point.
func (e *env) mounts() map[string][]*mountinfo.Info {
	e.t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(e.dir))
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]*mountinfo.Info{}
	for _, m := range ms {
		out[m.Mountpoint] = append(out[m.Mountpoint], m)
	}
	return out
}

// mountIDs maps each mount point under the env to its mount IDs.
func (e *env) mountIDs() map[string][]int {
	out := map[string][]int{}
	for p, ms := range e.mounts() {
		for _, m := range ms {
			out[p] = append(out[p], m.ID)
		}
	}
	return out
}

// loops returns the loop devices backed by each image under the env.
func (e *env) loops() map[string][]string {
	e.t.Helper()
	devs, err := loop.List()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, d := range devs {
		if strings.HasPrefix(d.BackingFile, e.dir) {
			out[d.BackingFile] = append(out[d.BackingFile], d.Path)
		}
	}
	return out
}

func (e *env) staging(name string) string { return filepath.Join(e.state, "staging", name) }

// assertConverged checks what a user would: each wanted volume has one
// loop device, one staging mount and each target mounted exactly once;
// each unwanted one has none of them.
func (e *env) assertConverged(wanted map[string][]string, unwanted ...string) {
	e.t.Helper()
	mounts := e.mounts()
	loops := e.loops()
	for name, targets := range wanted {
		img := filepath.Join(e.images, name+".img")
		if n := len(loops[img]); n != 1 {
			e.t.Errorf("%s: %d loop devices for its image, want 1 (%v)", name, n, loops[img])
		}
		if n := len(mounts[e.staging(name)]); n != 1 {
			e.t.Errorf("%s: %d staging mounts, want 1", name, n)
		}
		for _, t := range targets {
			if n := len(mounts[e.target(t)]); n != 1 {
				e.t.Errorf("%s: target %s mounted %d times, want 1", name, t, n)
			}
		}
	}
	for _, name := range unwanted {
		img := filepath.Join(e.images, name+".img")
		if n := len(loops[img]); n != 0 {
			e.t.Errorf("%s: %d loop devices left for a removed volume (%v)", name, n, loops[img])
		}
		if n := len(mounts[e.staging(name)]); n != 0 {
			e.t.Errorf("%s: staging still mounted", name)
		}
	}
}

func sha(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func execOut(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// Package agenttest runs the real volumed binary for tests (test/e2e, the
// crash replays): it builds it, runs it with its output captured, polls
// its status over its socket, and removes every mount and loop device a
// test left under its directory, even after a failure.
package agenttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/loop"
)

// Build builds cmd/volumed into dir with the build tags given; race adds
// the race detector (whose runtime needs cgo).
func Build(dir string, race bool, tags ...string) (string, error) {
	bin := filepath.Join(dir, "volumed")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cgo := "CGO_ENABLED=0"
	if race {
		args = append(args, "-race")
		cgo = "CGO_ENABLED=1"
	}
	build := exec.Command("go", append(args, "github.com/volumed/volumed/cmd/volumed")...)
	build.Env = append(os.Environ(), cgo)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build volumed: %w\n%s", err, out)
	}
	return bin, nil
}

// Buffer is a bytes.Buffer safe for a process's output and a test's
// reads at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Process is one run of a program (the agent) whose output is kept.
type Process struct {
	cmd  *exec.Cmd
	logs *Buffer
	done chan struct{}
	mu   sync.Mutex
	exit error
}

// Start runs bin with args and extra environment; out (nil for a fresh
// buffer) collects its stdout and stderr, so that the runs of one
// test's agent read as one log.
func Start(out *Buffer, bin string, args []string, env ...string) (*Process, error) {
	if out == nil {
		out = &Buffer{}
	}
	p := &Process{logs: out, done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.cmd = cmd
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exit = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Logs returns what the process wrote so far.
func (p *Process) Logs() string { return p.logs.String() }

// Signal sends sig and waits for the process to end.
func (p *Process) Signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	<-p.done
}

// Wait waits up to timeout for the process to end on its own and reports
// whether it did and whether SIGKILL ended it.
func (p *Process) Wait(timeout time.Duration) (exited, killed bool) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return false, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ee, ok := p.exit.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return true, ws.Signal() == syscall.SIGKILL
		}
	}
	return true, false
}

// Err is how the process ended (nil while it runs or if it exited 0).
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Cleanup unmounts everything under dir (the newest mount first) and
// detaches every loop device backed by a file under dir; logf reports
// what it could not undo.
func Cleanup(dir string, logf func(format string, args ...any)) {
	// Listed before the unmounts: an image on a filesystem mounted under
	// dir loses its path with that mount, and its loop device would no
	// longer be recognised as one of dir's.
	devs, _ := loop.List()
	mounts, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	slices.SortFunc(mounts, func(a, b *mountinfo.Info) int { return b.ID - a.ID })
	for _, m := range mounts {
		_ = unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
	}
	for _, d := range nested(devs) {
		if strings.HasPrefix(d.BackingFile, dir) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := loop.Detach(ctx, d); err != nil {
				logf("cleanup: detach %s: %v", d.Path, err)
			}
			cancel()
		}
	}
}

// nested orders loop devices so that one whose backing file lives on a
// filesystem of another comes first: the other stays busy until then.
func nested(devs []loop.Device) []loop.Device {
	byRdev := map[uint64]loop.Device{}
	for _, d := range devs {
		var st unix.Stat_t
		if unix.Stat(d.Path, &st) == nil {
			byRdev[st.Rdev] = d
		}
	}
	depth := func(d loop.Device) int {
		n := 0
		for seen := map[uint64]bool{}; !seen[d.BackingDev]; n++ {
			seen[d.BackingDev] = true
			under, ok := byRdev[d.BackingDev]
			if !ok {
				break
			}
			d = under
		}
		return n
	}
	out := slices.Clone(devs)
	slices.SortStableFunc(out, func(a, b loop.Device) int { return depth(b) - depth(a) })
	return out
}

// Status asks the agent on socket for its status.
func Status(ctx context.Context, socket string) (*api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return api.NewClient(socket).Status(ctx)
}

// WaitStatus polls the agent's status until cond holds or ctx ends; it
// returns the last status seen either way. The deadline is the caller's
// failure bound, never a performance assertion.
func WaitStatus(ctx context.Context, socket string, cond func(*api.Status) bool) (*api.Status, error) {
	var last *api.Status
	var lastErr error
	for {
		st, err := Status(ctx, socket)
		if err == nil {
			last = st
			if cond(st) {
				return st, nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(30 * time.Millisecond):
		}
	}
}

// Find returns the named volume of a status, or nil.
func Find(st *api.Status, name string) *api.Volume {
	for i := range st.Volumes {
		if st.Volumes[i].Name == name {
			return &st.Volumes[i]
		}
	}
	return nil
}

// Dump renders a status for a failure message.
func Dump(st *api.Status) string {
	if st == nil {
		return "<none>"
	}
	var b strings.Builder
	for _, v := range st.Volumes {
		fmt.Fprintf(&b, "\n  %s %s dev=%s err=%q targets=%+v", v.Name, v.Phase, v.Device, v.LastError, v.Targets)
	}
	for _, p := range st.Problems {
		fmt.Fprintf(&b, "\n  problem: %s", p)
	}
	return b.String()
}

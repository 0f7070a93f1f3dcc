package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/test/agenttest"
)

// helperEnv names what the test binary does when run as a helper
// process (TestMain checks it first) instead of running tests.
const helperEnv = "VOLUMED_E2E_HELPER"

func runHelper(name string, args []string) int {
	switch name {
	case "hold-conns":
		return holdConns(args)
	case "csi-plugin-info":
		return csiPluginInfo(args)
	}
	fmt.Fprintf(os.Stderr, "unknown helper %q\n", name)
	return 2
}

// holdConns ADDR N opens N keep-alive HTTP connections to ADDR, sends
// one request on each and holds them idle, as a local user could: it
// prints "holding N" and keeps them until its stdin closes (at most a
// minute, so that a lost test cannot leave it behind).
func holdConns(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: hold-conns ADDR N")
		return 2
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	var conns []net.Conn
	var failed int
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range jobs {
				c, err := net.DialTimeout("tcp", args[0], 2*time.Second)
				if err == nil {
					err = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
				}
				if err == nil {
					_, err = io.WriteString(c, "GET /held HTTP/1.1\r\nHost: volumed\r\n\r\n")
				}
				mu.Lock()
				if err != nil {
					failed++
				} else {
					conns = append(conns, c)
				}
				mu.Unlock()
			}
		})
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	fmt.Printf("holding %d (%d failed)\n", len(conns), failed)
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
	}
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// asNobody makes cmd run as uid/gid 65534, from /.
func asNobody(cmd *exec.Cmd) {
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}

// flood holds n idle connections to addr as nobody until stop.
type flood struct {
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{} // closed once the helper has exited
}

func startFlood(t *testing.T, addr string, n int) *flood {
	t.Helper()
	cmd := exec.Command(helperBin, addr, strconv.Itoa(n))
	cmd.Env = append(os.Environ(), helperEnv+"=hold-conns")
	asNobody(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &flood{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	t.Cleanup(f.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() {
		_ = cmd.Wait()
		close(f.done)
	}()
	if err != nil {
		<-f.done
		t.Fatalf("connection flood: %v (stderr %q)", err, stderr.String())
	}
	t.Logf("connection flood as nobody: %s", strings.TrimSpace(line))
	var held, failed int
	if _, err := fmt.Sscanf(line, "holding %d (%d failed)", &held, &failed); err != nil || held < n*9/10 {
		t.Fatalf("the flood holds too few connections to mean anything: %q", line)
	}
	return f
}

func (f *flood) stop() {
	f.stdin.Close()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.done
	}
}

// An unprivileged local user holding more idle keep-alive connections to
// /metrics than the agent has file descriptors: the agent still picks up
// a new manifest, answers `volumed status` and applies an edit; metrics
// are served again once the flood ends.
func TestMetricsConnectionFloodLeavesAgentWorking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := freeAddr(t)
	e.extraArgs = []string{"--metrics-address", addr}
	e.volume("before", "ext4", "64Mi", "before")
	e.start()
	e.waitReady("before")
	// A host's limit, scaled down to a flood a test can afford.
	e.limitFiles(1024)
	f := startFlood(t, addr, 1500)

	e.volume("after", "ext4", "64Mi", "after")
	e.waitReady("before", "after")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, volumedBin, "status", "--socket", e.socket).CombinedOutput()
	if err != nil {
		t.Fatalf("volumed status under the flood: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^after\s+Ready\s`).Match(out) {
		t.Errorf("volumed status under the flood does not show after Ready:\n%s", out)
	}
	e.volume("before", "ext4", "64Mi", "before", "before-2")
	e.waitFor("the edit's new target mounted", func(st *api.Status) bool {
		v := find(st, "before")
		return v != nil && v.Phase == api.PhaseReady && len(v.Targets) == 2 && v.Targets[1].Mounted
	})
	e.assertConverged(map[string][]string{"before": {"before", "before-2"}, "after": {"after"}})

	f.stop()
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if body, err = tryScrape(addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(body, `volumed_volume_phase{phase="Ready",volume="after"} 1`) {
		t.Errorf("metrics after the flood: %v\n%.2000s", err, body)
	}
}

func tryScrape(addr string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("metrics answered %s", resp.Status)
	}
	return string(b), err
}

// A second agent with its own state dir but the socket of a running one
// exits with an error naming the socket, before touching its volumes;
// the first keeps answering. Once the first is dead (SIGKILL leaves its
// socket file behind), the stale socket is replaced.
func TestSecondAgentRefusesLiveSocket(t *testing.T) {
	t.Parallel()
	first := newEnv(t)
	first.volume("one", "ext4", "64Mi", "one")
	first.start()
	first.waitReady("one")

	second := newEnv(t)
	second.socket = first.socket
	second.volume("two", "ext4", "64Mi", "two")
	second.start()
	second.waitExit(30 * time.Second)
	var ee *exec.ExitError
	if !errors.As(second.exit, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("second agent on a live socket: exit %v, want a non-zero exit code", second.exit)
	}
	want := "another volumed answers on the socket " + first.socket
	if log := second.logText(); !strings.Contains(log, want) {
		t.Errorf("second agent's output does not say %q:\n%s", want, log)
	}
	if l := second.loops(); len(l) != 0 {
		t.Errorf("the refused agent attached its volumes: %v", l)
	}
	first.waitReady("one")
	first.assertConverged(map[string][]string{"one": {"one"}})

	first.kill()
	if _, err := os.Stat(first.socket); err != nil {
		t.Fatalf("SIGKILL should leave the socket file behind: %v", err)
	}
	second.start()
	second.waitReady("two")
}

// worldDir is a directory anyone may enter, as /run/volumed is: what
// keeps others off the socket is then the socket's own mode.
func worldDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "volumed-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// runCLI runs the binary with args (as nobody if asked) and returns its
// stderr and exit code; the bound only keeps a broken binary from
// hanging the suite.
func runCLI(t *testing.T, nobody bool, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, volumedBin, args...)
	if nobody {
		asNobody(cmd)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("volumed %s did not finish within the bound; stderr:\n%s", strings.Join(args, " "), stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("volumed %s: %v", strings.Join(args, " "), err)
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

// `volumed wait` and `status` run by a non-root user fail at once with
// what to do, instead of retrying into their timeout.
func TestWaitAsNonRootSaysRootOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.socket = worldDir(t) + "/volumed.sock"
	e.volume("data", "ext4", "64Mi", "data")
	e.start()
	e.waitReady("data")
	const want = "permission denied: the volumed socket " // ... is root-only; run as root
	for _, args := range [][]string{
		{"wait", "data", "--timeout", "10m", "--socket", e.socket},
		{"status", "--socket", e.socket},
	} {
		stderr, code := runCLI(t, true, args...)
		if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "is root-only; run as root") {
			t.Errorf("volumed %s as nobody: exit %d, stderr:\n%s\nwant exit 1 and %q...root-only; run as root", args[0], code, stderr, want)
		}
	}
}

// `volumed wait NAME` for a name no manifest has says so once and waits
// for the manifest to appear; with --fail-missing it fails at once.
func TestWaitForVolumeWithoutManifest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.volume("data", "ext4", "64Mi", "data")
	e.start()
	e.waitReady("data")
	// The status names the manifest file as "file" (spec.source is
	// something else entirely).
	if out, want := e.statusJSON("data"), fmt.Sprintf("%q: %q", "file", filepath.Join(e.config, "data.yaml")); !strings.Contains(out, want) {
		t.Errorf("status -o json data:\n%s\nwant it to hold %s", out, want)
	}
	st, err := e.status()
	if err != nil || find(st, "data").File != filepath.Join(e.config, "data.yaml") {
		t.Errorf("status of data: %+v, %v; want file %s", find(st, "data"), err, filepath.Join(e.config, "data.yaml"))
	}

	stderr, code := runCLI(t, false, "wait", "data", "later", "--fail-missing", "--timeout", "10m", "--socket", e.socket)
	if code != 1 || !strings.Contains(stderr, "no manifest defines volume later") {
		t.Errorf("wait --fail-missing: exit %d, stderr:\n%s\nwant exit 1 and that no manifest defines volume later", code, stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, volumedBin, "wait", "data", "later", "--timeout", "10m", "--socket", e.socket)
	var buf agenttest.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	output := buf.String
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	const said = "no manifest defines volume later (yet); waiting\n"
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(output(), said) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-waited:
		t.Fatalf("wait for a volume without a manifest returned before one appeared: %v\n%s", err, output())
	default:
	}
	// Polls on: the notice must not repeat.
	time.Sleep(500 * time.Millisecond)
	e.volume("later", "ext4", "64Mi", "later")
	if err := <-waited; err != nil {
		t.Fatalf("wait once the manifest appeared: %v\n%s", err, output())
	}
	if n := strings.Count(output(), said); n != 1 {
		t.Errorf("wait said %d times that no manifest defines later, want once:\n%s", n, output())
	}
}

// Command bench measures volumed against a kernel-only floor on the same
// machine in the same run (make bench): N pre-formatted loop images
// brought up (attach, mount, bind) and torn down, by a bare Go loop and by
// the agent; then restart-to-Ready, RSS, idle CPU, fsyncs and binary size.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/loop"
)

func main() {
	n := flag.Int("n", 100, "volumes")
	idle := flag.Duration("idle", 30*time.Second, "idle period for the CPU measurement")
	bin := flag.String("bin", "bin/volumed", "volumed binary")
	agentArgs := flag.String("agent-args", "", "more arguments for volumed run, space-separated (e.g. --parallel 64)")
	perfDir := flag.String("perf", "", "record the restart and the edits with perf into this directory (the binary unstripped)")
	restarts := flag.Int("restarts", 0, "restart the agent this many times more and print the median (with -compare, each binary in turn)")
	compare := flag.String("compare", "", "another volumed binary whose restarts -restarts alternates with -bin's")
	flag.Parse()
	if os.Getenv("VOLUMED_BENCH_NS") == "" {
		if os.Geteuid() != 0 {
			fail("make bench needs root (loop devices, mounts)")
		}
		args := append([]string{"-m", "--propagation", "private", "--", os.Args[0]}, os.Args[1:]...)
		cmd := exec.Command("unshare", args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "VOLUMED_BENCH_NS=1")
		if err := cmd.Run(); err != nil {
			os.Exit(1)
		}
		return
	}
	exe, err := filepath.Abs(*bin)
	check(err)
	work, err := os.MkdirTemp("", "volumed-bench-")
	check(err)
	defer cleanup(work)
	// The agent's log outlives the run, for a look at what it did.
	defer func() {
		if b, err := os.ReadFile(filepath.Join(work, "agent.log")); err == nil {
			_ = os.WriteFile(filepath.Join(os.TempDir(), "volumed-bench-agent.log"), b, 0o644)
		}
	}()
	check(os.Chmod(work, 0o755))

	fmt.Printf("volumed bench: %d volumes, ext4 images pre-formatted, 1 target each\n", *n)
	images := makeImages(work, *n)

	floorUp, floorDown := floor(work, images)
	fmt.Printf("floor (bare LOOP_CONFIGURE+mount+bind, parallel): up %v (%.2f ms/vol), down %v\n", floorUp.Round(time.Millisecond), ms(floorUp)/float64(*n), floorDown.Round(time.Millisecond))

	b := &agentRun{exe: exe, work: work, n: *n, args: strings.Fields(*agentArgs)}
	b.writeManifests(images)
	prof := &profiler{dir: *perfDir, comm: filepath.Base(exe)[:min(15, len(filepath.Base(exe)))]}
	prof.start("start")
	up := b.startAndWaitReady()
	prof.stop()
	upCPU := time.Duration(b.cpuNanos())
	mem := b.rss()
	m := b.metricValues()
	commits, commitSecs := int64(m["volumed_state_commit_duration_seconds_count"]), m["volumed_state_commit_duration_seconds_sum"]
	fmt.Printf("agent cold start to all Ready: %v  ratio %.2fx (target <= 1.5x); agent CPU %v, its child processes' %v\n", up.Round(time.Millisecond), float64(up)/float64(floorUp), upCPU.Round(time.Millisecond), time.Duration(b.childTicks()*int64(time.Second)/clockTicks()))
	fmt.Printf("agent RSS with %d volumes, at Ready: %v (target <= 25 MiB at 100, 40 MiB at 1000); Go heap in use %.1f MiB, stacks %.1f MiB, %d goroutines\n", *n, mem,
		m["go_memstats_heap_inuse_bytes"]/(1<<20), m["go_memstats_stack_inuse_bytes"]/(1<<20), int(m["go_goroutines"]))
	fmt.Printf("durable commits (fsyncs) to converge: %d, %.2f per volume, %.1f ms each, %.0f%% of the start spent committing\n",
		commits, float64(commits)/float64(*n), 1000*commitSecs/float64(max(commits, 1)), 100*commitSecs/up.Seconds())

	cpu0 := b.cpuNanos()
	time.Sleep(*idle)
	fmt.Printf("agent CPU over %v idle: %v\n", *idle, time.Duration(b.cpuNanos()-cpu0).Round(time.Microsecond))
	// Read before the scrape, whose own garbage (a series per volume and
	// phase) would be counted otherwise.
	mem = b.rss()
	m = b.metricValues()
	fmt.Printf("agent RSS after the idle period: %v; Go heap in use %.1f MiB, stacks %.1f MiB (after a first scrape)\n", mem,
		m["go_memstats_heap_inuse_bytes"]/(1<<20), m["go_memstats_stack_inuse_bytes"]/(1<<20))

	b.stop()
	prof.start("restart")
	restart := b.startAndWaitReady()
	prof.stop()
	fmt.Printf("restart to all Ready with %d volumes in place: %v (target <= 20 ms at 100, 100 ms at 1000; includes process start); agent CPU %v\n", *n, restart.Round(time.Millisecond), time.Duration(b.cpuNanos()).Round(time.Millisecond))

	if *restarts > 0 {
		bins := []string{exe}
		if *compare != "" {
			other, err := filepath.Abs(*compare)
			check(err)
			bins = append(bins, other)
		}
		b.restarts(*restarts, bins)
	}

	prof.start("edit")
	b.editOne(images, 5)
	prof.stop()

	prof.start("teardown")
	cpuDown := b.cpuNanos()
	down := b.removeAllAndWaitDetached(images)
	cpuDown = b.cpuNanos() - cpuDown
	prof.stop()
	fmt.Printf("agent remove all manifests to all loop devices gone: %v  ratio %.2fx (target <= 2x); agent CPU %v\n", down.Round(time.Millisecond), float64(down)/float64(floorDown), time.Duration(cpuDown).Round(time.Millisecond))
	b.stop()

	blankCost(work, 1<<30, 5)

	fi, err := os.Stat(exe)
	check(err)
	fmt.Printf("static binary size: %.1f MiB\n", float64(fi.Size())/(1<<20))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fail(msg string) { fmt.Fprintln(os.Stderr, "bench:", msg); os.Exit(1) }
func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func makeImages(work string, n int) []string {
	dir := filepath.Join(work, "images")
	check(os.MkdirAll(dir, 0o755))
	images := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range images {
		images[i] = filepath.Join(dir, fmt.Sprintf("v%03d.img", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f, err := os.Create(images[i])
			check(err)
			check(f.Truncate(16 << 20))
			f.Close()
			if out, err := exec.Command("mkfs.ext4", "-q", "-F", images[i]).CombinedOutput(); err != nil {
				fail(fmt.Sprintf("mkfs: %v %s", err, out))
			}
		}()
	}
	wg.Wait()
	return images
}

// floor is the least the kernel needs: attach, mount, bind; and back.
func floor(work string, images []string) (up, down time.Duration) {
	type vol struct {
		dev             *loop.Device
		staging, target string
	}
	vols := make([]vol, len(images))
	par := func(fn func(i int)) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range images {
			wg.Add(1)
			go func() { defer wg.Done(); sem <- struct{}{}; fn(i); <-sem }()
		}
		wg.Wait()
		return time.Since(start)
	}
	for i := range vols {
		vols[i].staging = filepath.Join(work, "floor", "staging", strconv.Itoa(i))
		vols[i].target = filepath.Join(work, "floor", "target", strconv.Itoa(i))
		check(os.MkdirAll(vols[i].staging, 0o755))
		check(os.MkdirAll(vols[i].target, 0o755))
	}
	up = par(func(i int) {
		d, err := loop.Attach(context.Background(), loop.Options{File: images[i]})
		check(err)
		vols[i].dev = d
		check(unix.Mount(d.Path, vols[i].staging, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""))
		check(unix.Mount(vols[i].staging, vols[i].target, "", unix.MS_BIND, ""))
	})
	down = par(func(i int) {
		check(unix.Unmount(vols[i].target, 0))
		check(unix.Unmount(vols[i].staging, 0))
		check(loop.Detach(context.Background(), *vols[i].dev))
	})
	return up, down
}

type agentRun struct {
	exe, work string
	n         int
	args      []string
	cmd       *exec.Cmd
	metrics   string
}

func (b *agentRun) conf() string   { return filepath.Join(b.work, "volumes.d") }
func (b *agentRun) socket() string { return filepath.Join(b.work, "volumed.sock") }

func (b *agentRun) writeManifests(images []string) {
	check(os.MkdirAll(b.conf(), 0o755))
	for i, img := range images {
		m := fmt.Sprintf("apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: v%03d}\nspec:\n  source: {loop: {file: %s}}\n  filesystem: {type: ext4}\n  mounts: [{path: %s}]\n",
			i, img, filepath.Join(b.work, "mnt", fmt.Sprintf("v%03d", i)))
		check(os.WriteFile(filepath.Join(b.conf(), fmt.Sprintf("v%03d.yaml", i)), []byte(m), 0o644))
	}
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().String()
}

// startAndWaitReady starts the agent and waits until it tells systemd
// (sd_notify, on a socket of the bench's) that all N volumes are Ready;
// one status then confirms it. The bench used to ask for the status of
// every volume every 2 ms, which at N=1000 cost the agent about a tenth
// of its CPU, on top of what it measured.
func (b *agentRun) startAndWaitReady() time.Duration {
	b.metrics = freePort()
	notify := filepath.Join(b.work, "notify.sock")
	_ = os.Remove(notify)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	check(err)
	defer conn.Close()
	start := time.Now()
	args := append([]string{"run", "--config-dir", b.conf(), "--state-dir", filepath.Join(b.work, "state"),
		"--socket", b.socket(), "--metrics-address", b.metrics, "--log-level", "info"}, b.args...)
	b.cmd = exec.Command(b.exe, args...)
	b.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify)
	log, err := os.OpenFile(filepath.Join(b.work, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	check(err)
	b.cmd.Stdout, b.cmd.Stderr = log, log
	check(b.cmd.Start())
	want := fmt.Sprintf("STATUS=%d ready", b.n)
	buf := make([]byte, 4096)
	for {
		check(conn.SetReadDeadline(start.Add(5 * time.Minute)))
		n, err := conn.Read(buf)
		if err != nil {
			fail("agent did not converge (" + err.Error() + "); see " + filepath.Join(b.work, "agent.log"))
		}
		if slices.Contains(strings.Split(string(buf[:n]), "\n"), want) {
			took := time.Since(start)
			b.confirmReady()
			return took
		}
	}
}

// confirmReady checks, in the agent's own status, what its notification said.
func (b *agentRun) confirmReady() {
	st, err := api.NewClient(b.socket()).Status(context.Background())
	check(err)
	ready := 0
	for _, v := range st.Volumes {
		if v.Phase == api.PhaseReady {
			ready++
		}
	}
	if ready != b.n || len(st.Volumes) != b.n {
		fail(fmt.Sprintf("agent said all %d volumes were Ready, its status shows %d of %d", b.n, ready, len(st.Volumes)))
	}
}

// removeAllAndWaitDetached removes every manifest and waits until the
// agent's loop devices are gone. It watches only those devices: a scan of
// every loop device on the host every 2 ms (over a thousand once the
// floor has run) took most of a core from the agent it timed.
func (b *agentRun) removeAllAndWaitDetached(images []string) time.Duration {
	st, err := api.NewClient(b.socket()).Status(context.Background())
	check(err)
	var left []string
	for _, v := range st.Volumes {
		left = append(left, filepath.Join("/sys/block", filepath.Base(v.Device), "loop", "backing_file"))
	}
	start := time.Now()
	for i := range images {
		check(os.Remove(filepath.Join(b.conf(), fmt.Sprintf("v%03d.yaml", i))))
	}
	for {
		left = slices.DeleteFunc(left, func(p string) bool {
			f, err := os.ReadFile(p)
			return err != nil || !strings.HasPrefix(string(f), b.work)
		})
		if len(left) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > 5*time.Minute {
			fail("teardown did not finish")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (b *agentRun) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Wait()
}

// rss is the agent's resident memory in KiB: all of it, and its
// anonymous (heap, stacks) and file-backed (the binary's pages) parts.
type rss struct{ all, anon, file int64 }

func (r rss) String() string {
	return fmt.Sprintf("%.1f MiB (anonymous %.1f, file-backed %.1f)", float64(r.all)/1024, float64(r.anon)/1024, float64(r.file)/1024)
}

func (b *agentRun) rss() rss {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	check(err)
	var r rss
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			r.all = v
		case "RssAnon:":
			r.anon = v
		case "RssFile:":
			r.file = v
		}
	}
	return r
}

// childTicks is the CPU of the agent's child processes that have ended
// (blkid, mkfs, ...): theirs is the agent's work too, on the same cores.
// /proc/PID/stat's cutime and cstime, after the command's name.
func (b *agentRun) childTicks() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", b.cmd.Process.Pid))
	check(err)
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[13], 10, 64)
	st, _ := strconv.ParseInt(f[14], 10, 64)
	return u + st
}

func clockTicks() int64 { return 100 } // USER_HZ on Linux

// metricValues reads the agent's unlabelled metrics: the durable
// commits and the seconds they took, the Go runtime's memory.
func (b *agentRun) metricValues() map[string]float64 {
	resp, err := http.Get("http://" + b.metrics + "/metrics")
	check(err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]float64{"volumed_state_commit_duration_seconds_count": -1}
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		out[f[0]] = v
	}
	return out
}

func cleanup(work string) {
	out, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], work) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = unix.Unmount(points[i], unix.MNT_DETACH)
	}
	if devs, err := loop.List(); err == nil {
		for _, d := range devs {
			if strings.HasPrefix(d.BackingFile, work) {
				_ = loop.Detach(context.Background(), d)
			}
		}
	}
	os.RemoveAll(work)
}

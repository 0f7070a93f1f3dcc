package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/internal/testtool"
)

// loopManifest writes a loop volume with its image at file, fs as its
// filesystem block and one target named like the volume.
func (e *env) loopManifest(name, file, size, fs string) {
	e.t.Helper()
	e.write(name+".yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source: {loop: {file: %s, create: {size: %s}}}
  filesystem: {%s}
  mounts: [{path: %s}]
`, name, file, size, fs, e.target(name)))
}

// waitCondition waits until the status shows volume name not Ready with
// a condition of type typ whose message holds every one of words.
func (e *env) waitCondition(name, typ string, words ...string) api.Condition {
	e.t.Helper()
	var got api.Condition
	e.waitFor(name+" "+typ+" "+strings.Join(words, ","), func(st *api.Status) bool {
		v := find(st, name)
		c := condition(v, typ)
		if c == nil || v.Phase == api.PhaseReady || !containsAll(c.Message, words) {
			return false
		}
		got = *c
		return true
	})
	return got
}

// statusJSON is what `volumed status -o json` prints for one volume.
func (e *env) statusJSON(name string) string {
	e.t.Helper()
	out, err := exec.Command(volumedBin, "status", "--socket", e.socket, "-o", "json", name).CombinedOutput()
	if err != nil {
		e.t.Fatalf("volumed status -o json: %v\n%s", err, out)
	}
	return string(out)
}

// zeros: the file holds nothing but zero bytes (nothing was written to
// it, no filesystem made on it).
func zeros(t *testing.T, p string) bool {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return len(bytes.Trim(b, "\x00")) == 0
}

func (e *env) loopCount() int {
	n := 0
	for _, devs := range e.loops() {
		n += len(devs)
	}
	return n
}

// readyVolume starts an agent (resync 300 ms) with one ext4 loop volume
// of that name and waits for it to be Ready; it returns the image path.
func readyVolume(t *testing.T, name string) (*env, string) {
	t.Helper()
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "300ms"}
	img := filepath.Join(e.images, name+".img")
	e.loopManifest(name, img, "64Mi", "type: ext4")
	e.start()
	e.waitReady(name)
	return e, img
}

func (e *env) restartWithoutState() {
	e.t.Helper()
	e.kill()
	if err := os.Remove(filepath.Join(e.state, "state.db")); err != nil {
		e.t.Fatal(err)
	}
	e.start()
}

// An image moved away and replaced by a blank file under a live volume:
// the volume is Degraded with BackingChanged naming the path, stays on
// its old file, and the blank file is neither attached nor formatted,
// also after a restart that lost the state file. Moving the image back
// clears the condition.
func TestImageReplacedUnderVolume(t *testing.T) {
	t.Parallel()
	e, img := readyVolume(t, "r")
	keep := filepath.Join(e.target("r"), "keep")
	if err := os.WriteFile(keep, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(img, img+".old"); err != nil {
		t.Fatal(err)
	}
	e.image("r.img", 64<<20)

	c := e.waitCondition("r", "BackingChanged", img, "replaced")
	if c.Reason != "ImageReplaced" {
		t.Errorf("reason %q, want ImageReplaced", c.Reason)
	}
	if js := e.statusJSON("r"); !strings.Contains(js, `"BackingChanged"`) || !strings.Contains(js, `"Degraded"`) {
		t.Errorf("status -o json does not show the condition and Degraded:\n%s", js)
	}
	check := func(when string) {
		time.Sleep(time.Second) // several resyncs
		if !zeros(t, img) {
			t.Errorf("%s: the blank file put at the image's path was written to (formatted?)", when)
		}
		if n := e.loopCount(); n != 1 {
			t.Errorf("%s: %d loop devices on the env's images, want 1 (%v)", when, n, e.loops())
		}
		if b, err := os.ReadFile(keep); err != nil || string(b) != "data" {
			t.Errorf("%s: the volume's file reads %q, %v", when, b, err)
		}
	}
	check("running")

	e.restartWithoutState()
	e.waitCondition("r", "BackingChanged", img, "replaced")
	check("after a restart without state")

	if err := os.Rename(img+".old", img); err != nil {
		t.Fatal(err)
	}
	v := find(e.waitReady("r"), "r")
	if len(v.Conditions) != 0 {
		t.Errorf("conditions after the image came back: %+v", v.Conditions)
	}
}

// An image deleted under a live volume: BackingChanged says so, at the
// resync and again after restarts (with and without the state file): the
// device still bound to the deleted inode is found, no image is made at
// the path and no second device attached.
func TestImageDeletedUnderVolume(t *testing.T) {
	t.Parallel()
	e, img := readyVolume(t, "d")
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	c := e.waitCondition("d", "BackingChanged", img, "deleted", "copy the data out")
	if c.Reason != "ImageDeleted" {
		t.Errorf("reason %q, want ImageDeleted", c.Reason)
	}
	check := func(when string) {
		time.Sleep(time.Second)
		if _, err := os.Stat(img); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: an image was made at the deleted one's path (%v)", when, err)
		}
		if n := e.loopCount(); n != 1 {
			t.Errorf("%s: %d loop devices, want the one on the deleted image (%v)", when, n, e.loops())
		}
	}
	check("running")
	e.kill()
	e.start()
	e.waitCondition("d", "BackingChanged", img, "deleted")
	check("after a restart")
	e.restartWithoutState()
	e.waitCondition("d", "BackingChanged", img, "deleted")
	check("after a restart without state")
}

// The filesystem holding a sparse image runs out of space: BackingFull
// names its directory; freeing space clears it.
func TestBackingFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "300ms"}
	small := filepath.Join(e.dir, "small")
	if err := os.Mkdir(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=48m"); err != nil {
		t.Fatal(err)
	}
	e.loopManifest("f", filepath.Join(small, "f.img"), "256Mi, overcommit: true", "type: ext4")
	e.start()
	e.waitReady("f")

	filler := fillDir(t, small)
	e.waitCondition("f", "BackingFull", small, "free")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if v := find(e.waitReady("f"), "f"); len(v.Conditions) != 0 {
		t.Errorf("conditions after space was freed: %+v", v.Conditions)
	}
}

// ext4 records an error and remounts itself read-only: the volume shows
// FilesystemError and /metrics stops claiming free space on it.
func TestFilesystemErrorRemountedReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := freeAddr(t)
	e.extraArgs = []string{"--resync", "300ms", "--metrics-address", addr}
	e.loopManifest("x", filepath.Join(e.images, "x.img"), "64Mi", "type: ext4, mountOptions: [errors=remount-ro]")
	e.start()
	dev := find(e.waitReady("x"), "x").Device
	capacity := `volumed_volume_capacity_bytes{volume="x"}`
	e.waitFor("capacity in /metrics", func(*api.Status) bool { _, ok := sample(t, scrape(t, addr), capacity); return ok })

	trigger := filepath.Join("/sys/fs/ext4", filepath.Base(dev), "trigger_fs_error")
	if err := os.WriteFile(trigger, []byte("volumed e2e test\n"), 0o200); err != nil {
		t.Fatalf("force an ext4 error (kernel without %s?): %v", trigger, err)
	}
	e.waitCondition("x", "FilesystemError", dev, "read-only", "errors")
	body := scrape(t, addr)
	if _, ok := sample(t, body, capacity); ok {
		t.Error("/metrics still reports the capacity of a filesystem the kernel gave up on")
	}
	if v, _ := sample(t, body, `volumed_volume_condition{type="FilesystemError",volume="x"}`); v != 1 {
		t.Errorf("volumed_volume_condition for FilesystemError = %v, want 1", v)
	}
}

// xfs shut down by the kernel (as on a metadata I/O error): the volume
// shows FilesystemError, reason ShutDown.
func TestFilesystemErrorXFSShutDown(t *testing.T) {
	t.Parallel()
	xfsIO := testtool.Need(t, "xfsprogs", "xfs_io")[0]
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "300ms"}
	e.loopManifest("s", filepath.Join(e.images, "s.img"), "320Mi", "type: xfs")
	e.start()
	dev := find(e.waitReady("s"), "s").Device
	if out, err := exec.Command(xfsIO, "-x", "-c", "shutdown", e.target("s")).CombinedOutput(); err != nil {
		t.Fatalf("xfs_io shutdown: %v %s", err, out)
	}
	if c := e.waitCondition("s", "FilesystemError", dev, "shut it down"); c.Reason != "ShutDown" {
		t.Errorf("reason %q, want ShutDown", c.Reason)
	}
}

// A failing online grow shows as GrowFailed with the tool's message, not
// Ready; the next grow that works clears it. (btrfs: ext4's online resize
// is refused by some kernels, this machine's among them.)
func TestGrowFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "300ms"}
	real, err := exec.LookPath("btrfs")
	if err != nil {
		testtool.Missing(t, "btrfs", "btrfs-progs", err)
	}
	bin := filepath.Join(e.dir, "bin")
	flag := filepath.Join(e.dir, "fail-grow")
	script := fmt.Sprintf("#!/bin/sh\nif [ -e %s ]; then echo 'btrfs: simulated failure' >&2; exit 1; fi\nexec %s \"$@\"\n", flag, real)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "btrfs"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(e.images, "g.img")
	e.loopManifest("g", img, "128Mi", "type: btrfs, grow: true")
	e.start("PATH=" + bin + ":" + os.Getenv("PATH"))
	e.waitReady("g")
	var before int64
	e.waitFor("capacity known", func(st *api.Status) bool { before = find(st, "g").CapacityBytes; return before > 0 })

	e.loopManifest("g", img, "256Mi", "type: btrfs, grow: true")
	e.waitCondition("g", "GrowFailed", "simulated failure")
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	e.waitFor("grown and Ready", func(st *api.Status) bool {
		v := find(st, "g")
		return v.Phase == api.PhaseReady && len(v.Conditions) == 0 && v.CapacityBytes > before+100<<20
	})
}

// A process with its working directory in a target blocks the teardown:
// TeardownBlocked names its pid and command, retries count up; once it
// is gone the volume is torn down and the condition with it.
func TestTeardownBlockedByHolder(t *testing.T) {
	t.Parallel()
	e, _ := readyVolume(t, "h")
	sleep := exec.Command("sleep", "600")
	sleep.Dir = e.target("h")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()

	e.remove("h.yaml")
	e.waitCondition("h", "TeardownBlocked", "pid "+strconv.Itoa(sleep.Process.Pid)+" (sleep, cwd)", e.target("h"))
	e.waitFor("retries counted", func(st *api.Status) bool { v := find(st, "h"); return v != nil && v.Retries >= 1 })

	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	e.waitGone("h")
	e.assertConverged(nil, "h")
}

// A process holding the loop device open blocks its detach once the
// mounts are gone: TeardownBlocked names it and the device; once it is
// gone the device is detached.
func TestDetachBlockedByOpener(t *testing.T) {
	t.Parallel()
	e, _ := readyVolume(t, "o")
	dev := find(e.waitReady("o"), "o").Device
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "600")
	sleep.Stdin = f
	err = sleep.Start()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()

	e.remove("o.yaml")
	e.waitCondition("o", "TeardownBlocked", "detach of "+dev, "pid "+strconv.Itoa(sleep.Process.Pid)+" (sleep, fd 0)")

	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	e.waitGone("o")
	e.assertConverged(nil, "o")
}

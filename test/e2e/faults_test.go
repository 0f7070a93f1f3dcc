package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/loop"
)

// reboot simulates a power cut: SIGKILL, then the kernel state is gone —
// every mount under the env unmounted (but the state filesystem, which a
// reboot keeps) and every loop device of its images detached — while the
// state file stays as it was.
func (e *env) reboot() {
	e.t.Helper()
	e.kill()
	unix.Sync()
	mounts := e.mounts()
	var points []string
	for p := range mounts {
		if p != e.state {
			points = append(points, p)
		}
	}
	// Deepest first: a target inside another goes before it.
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		for range mounts[p] {
			if err := unix.Unmount(p, 0); err != nil {
				e.t.Fatalf("reboot: unmount %s: %v", p, err)
			}
		}
	}
	devs, err := loop.List()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range devs {
		if strings.HasPrefix(d.BackingFile, e.images) {
			if err := loop.Detach(e.t.Context(), d); err != nil {
				e.t.Fatalf("reboot: detach %s: %v", d.Path, err)
			}
		}
	}
}

// faultManifest writes an ext4 loop volume with one target and the given
// mount options.
func (e *env) faultManifest(name string, mountOptions ...string) {
	e.t.Helper()
	fs := "type: ext4"
	if len(mountOptions) > 0 {
		fs += ", mountOptions: [" + strings.Join(mountOptions, ", ") + "]"
	}
	e.loopManifest(name, filepath.Join(e.images, name+".img"), "64Mi", fs)
}

// fsUUID is the filesystem UUID on an image, "" when it has none.
func fsUUID(t *testing.T, img string) string {
	t.Helper()
	out, _ := exec.Command("blkid", "-p", "-o", "value", "-s", "UUID", img).Output()
	return strings.TrimSpace(string(out))
}

func condition(v *api.Volume, typ string) *api.Condition {
	if v == nil {
		return nil
	}
	for i := range v.Conditions {
		if v.Conditions[i].Type == typ {
			return &v.Conditions[i]
		}
	}
	return nil
}

// waitMountRefused waits until the volume's mount is refused by its
// options, shown as a configuration error.
func (e *env) waitMountRefused(name string) {
	e.t.Helper()
	st := e.waitFor(name+" mount refused by its options", func(st *api.Status) bool {
		return condition(find(st, name), "MountConfig") != nil
	})
	v := find(st, name)
	if v.Phase == api.PhaseReady || v.Phase == api.PhaseDegraded {
		e.t.Errorf("%s: phase %s with a refused mount", name, v.Phase)
	}
}

// The data-loss bug: a state-file write fails at a commit of an
// operation, a power cut follows before anything else is recorded, and
// the next start has a typo in mountOptions. The filesystem must come
// through: same UUID, the data written in between intact, nothing
// mounted twice; the typo is shown as a configuration error.
func TestStateWriteFaultThenRebootAndBadOptions(t *testing.T) {
	t.Parallel()
	errnos := []string{"ENOSPC", "EIO", "EROFS"}
	i := 0
	for _, op := range []string{"attach", "format", "mount_device", "publish"} {
		stages := []string{"begin", "finish"}
		if op == "publish" {
			stages = stages[1:] // it writes no intent: only its outcome is committed
		}
		for _, stage := range stages {
			errno := errnos[i%len(errnos)]
			i++
			t.Run(op+":"+stage+"="+errno, func(t *testing.T) {
				e := newEnv(t)
				full := filepath.Join(e.dir, "state-full")
				img := filepath.Join(e.images, "vol.img")
				e.faultManifest("vol")
				e.start("VOLUMED_STATE_FAULT="+op+":"+stage+"="+errno, "VOLUMED_STATE_FAULT_FILE="+full)
				// The fault shows: as an unrecorded outcome, or as an
				// operation that cannot start.
				st := e.waitFor("the state-file fault to show", func(st *api.Status) bool {
					v := find(st, "vol")
					return condition(v, "StateNotRecorded") != nil || (v != nil && strings.Contains(v.LastError, "record intent"))
				})
				if v := find(st, "vol"); v.Phase == api.PhaseReady {
					t.Errorf("Ready while the state file cannot be written: %+v", v)
				}
				uuid := fsUUID(t, img)
				e.reboot()
				if err := os.Remove(full); err != nil {
					t.Fatalf("the fault never filled the state filesystem: %v", err)
				}

				// Restart with a typo: the pending intent (if any) is
				// resolved, the mount refused, nothing formatted again.
				e.faultManifest("vol", "bogus")
				e.start()
				e.waitMountRefused("vol")
				if uuid != "" && fsUUID(t, img) != uuid {
					t.Fatalf("filesystem made again: UUID %s -> %s", uuid, fsUUID(t, img))
				}

				// Fixed: Ready; data written; another power cut and typo.
				e.faultManifest("vol")
				e.waitReady("vol")
				data := filepath.Join(e.target("vol"), "data")
				if err := os.WriteFile(data, []byte("precious "+t.Name()), 0o644); err != nil {
					t.Fatal(err)
				}
				sum, uuid := sha(t, data), fsUUID(t, img)
				e.reboot()
				e.faultManifest("vol", "bogus")
				e.start()
				e.waitMountRefused("vol")
				e.faultManifest("vol")
				e.waitReady("vol")
				if got := fsUUID(t, img); got != uuid {
					t.Fatalf("filesystem made again: UUID %s -> %s", uuid, got)
				}
				if sha(t, data) != sum {
					t.Fatal("data changed")
				}
				e.assertConverged(map[string][]string{"vol": {"vol"}})
				if strings.Contains(e.logText(), "formatting again") {
					t.Error("the log says a format was redone")
				}
			})
		}
	}
}

// The outcome of a format whose commit failed is kept and recorded when
// space returns; until then the volume says its state is not recorded and
// starts nothing new.
func TestUnrecordedOutcomeIsRetriedUntilDurable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	full := filepath.Join(e.dir, "state-full")
	e.faultManifest("vol")
	e.start("VOLUMED_STATE_FAULT=format:finish=ENOSPC", "VOLUMED_STATE_FAULT_FILE="+full)
	st := e.waitFor("StateNotRecorded", func(st *api.Status) bool { return condition(find(st, "vol"), "StateNotRecorded") != nil })
	c := condition(find(st, "vol"), "StateNotRecorded")
	if !strings.Contains(c.Message, "no space left on device") {
		t.Errorf("condition does not say why: %+v", c)
	}
	// Nothing new is started while the state file does not know.
	time.Sleep(1500 * time.Millisecond)
	if n := len(e.mounts()[e.staging("vol")]); n != 0 {
		t.Errorf("mounted while the format's outcome is unrecorded")
	}
	if err := os.Remove(full); err != nil {
		t.Fatal(err)
	}
	e.waitReady("vol")
	if v := find(e.waitReady("vol"), "vol"); len(v.Conditions) != 0 {
		t.Errorf("conditions left on a Ready volume: %+v", v.Conditions)
	}
	// Durable: a power cut now leaves the format no intent to resolve.
	// (The mount's outcome after a format may still ride a later commit:
	// its intent is resolved from the kernel, and is no concern here.)
	e.reboot()
	e.start()
	e.waitReady("vol")
	for _, l := range strings.Split(e.logText(), "\n") {
		if strings.Contains(l, "resolving uncertain operation") && strings.Contains(l, "operation=format") {
			t.Errorf("the format's intent was left on disk after its outcome was recorded:\n%s", e.logText())
		}
	}
}

// A removed volume whose teardown's outcome the state file could not
// take stays in status, with StateNotRecorded, until it is recorded: the
// state file still says it is attached. It used to vanish from status,
// its condition with it, as soon as the detach was done in the kernel.
func TestRemovedVolumeStaysInStatusUntilRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	full := filepath.Join(e.dir, "state-full")
	e.faultManifest("vol")
	e.start("VOLUMED_STATE_FAULT=detach:finish=EIO", "VOLUMED_STATE_FAULT_FILE="+full)
	e.waitReady("vol")
	e.remove("vol.yaml")
	st := e.waitFor("StateNotRecorded on the removed volume", func(st *api.Status) bool {
		return condition(find(st, "vol"), "StateNotRecorded") != nil
	})
	if v := find(st, "vol"); v.Phase == api.PhaseReady {
		t.Errorf("a removed, unrecorded volume is Ready: %+v", v)
	}
	if len(e.loops()) != 0 {
		t.Errorf("the detach itself did not happen: %v", e.loops())
	}
	// Still there a while later: the condition is not dropped with the
	// volume's history.
	time.Sleep(1500 * time.Millisecond)
	if st, err := e.status(); err != nil || condition(find(st, "vol"), "StateNotRecorded") == nil {
		t.Errorf("the removed volume's StateNotRecorded went away while the state file still failed (err %v)", err)
	}
	if err := os.Remove(full); err != nil {
		t.Fatal(err)
	}
	e.waitGone("vol")
}

// mountStateFS puts the env's state dir on a filesystem of its own: a
// size-limited tmpfs, which a reboot simulation keeps.
func (e *env) mountStateFS(size string) {
	e.t.Helper()
	if err := os.MkdirAll(e.state, 0o700); err != nil {
		e.t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", e.state, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		e.t.Fatal(err)
	}
}

// fillDir takes every free byte of the filesystem holding dir.
func fillDir(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	for n := len(buf) / 2; n > 0; n /= 2 { // the last partial blocks
		if _, err := f.Write(buf[:n]); err != nil {
			continue
		}
	}
	return p
}

// A full state filesystem (a real one: a tmpfs with no byte left) while
// 30 volumes are added: what cannot be recorded waits and says so; when
// space returns, all 30 converge, and a power cut after that loses no
// byte of what they hold.
func TestFullStateFilesystemWhileAddingVolumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mountStateFS("2m")
	e.start()
	e.waitFor("agent up", func(*api.Status) bool { return true })
	filler := fillDir(t, e.state)
	var names []string
	for i := range 30 {
		name := fmt.Sprintf("v%02d", i)
		names = append(names, name)
		e.faultManifest(name)
	}
	e.waitFor("volumes held up by the full state filesystem", func(st *api.Status) bool {
		held := 0
		for _, v := range st.Volumes {
			if strings.Contains(v.LastError, "no space left") || condition(&v, "StateNotRecorded") != nil {
				held++
			}
		}
		return held > 0
	})
	st, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range st.Volumes {
		if v.Phase == api.PhaseReady && condition(&v, "StateNotRecorded") != nil {
			t.Errorf("%s Ready while its state is not recorded", v.Name)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.waitReady(names...)
	want := map[string][]string{}
	sums := map[string][32]byte{}
	for _, n := range names {
		want[n] = []string{n}
		p := filepath.Join(e.target(n), "data")
		if err := os.WriteFile(p, []byte("bytes of "+n), 0o644); err != nil {
			t.Fatal(err)
		}
		sums[n] = sha(t, p)
	}
	e.assertConverged(want)
	e.reboot()
	e.start()
	e.waitReady(names...)
	e.assertConverged(want)
	for _, n := range names {
		if sha(t, filepath.Join(e.target(n), "data")) != sums[n] {
			t.Errorf("%s: data changed", n)
		}
	}
	if strings.Contains(e.logText(), "formatting again") {
		t.Error("a format was redone")
	}
}

// A state filesystem that is read-only at start is an error that says
// so; the healthy file on it is never moved aside as damaged.
func TestReadOnlyStateDirAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mountStateFS("4m")
	e.faultManifest("vol")
	e.start()
	e.waitReady("vol")
	e.stop()
	if err := unix.Mount("", e.state, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	e.start()
	if e.waitExit(30 * time.Second) {
		t.Fatal("agent was killed instead of exiting with an error")
	}
	log := e.logText()
	if !strings.Contains(log, "is read-only") || strings.Contains(log, "damaged") {
		t.Errorf("want a read-only error, not damage:\n%s", log)
	}
	entries, _ := os.ReadDir(e.state)
	for _, en := range entries {
		if strings.Contains(en.Name(), "corrupt") {
			t.Errorf("healthy state file moved aside: %s", en.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(e.state, "state.db")); err != nil {
		t.Errorf("state file gone: %v", err)
	}
	if err := unix.Mount("", e.state, "", unix.MS_REMOUNT, ""); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitReady("vol")
}

// A frozen state filesystem: an operation waits for its intent, and the
// status says so and for how long; SIGTERM still stops the agent's work
// (the process itself ends when the kernel lets go of the write it is
// blocked in, at the thaw).
func TestFrozenStateFilesystem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	img := filepath.Join(e.dir, "state.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v: %s", err, out)
	}
	if err := os.MkdirAll(e.state, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, e.state).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = exec.Command("fsfreeze", "-u", e.state).Run()
		}
	}
	t.Cleanup(func() {
		thaw()
		_ = exec.Command("umount", "-d", e.state).Run()
	})
	e.faultManifest("a")
	e.start()
	e.waitReady("a")
	if out, err := exec.Command("fsfreeze", "-f", e.state).CombinedOutput(); err != nil {
		t.Fatalf("fsfreeze: %v: %s", err, out)
	}
	e.faultManifest("b")
	st := e.waitFor("b waiting for the state file", func(st *api.Status) bool {
		c := condition(find(st, "b"), "WaitingForState")
		return c != nil && strings.Contains(c.Message, "waiting for the state file (")
	})
	if v := find(st, "a"); v.Phase != api.PhaseReady {
		t.Errorf("a bystander volume is %s", v.Phase)
	}
	p := e.running()
	// The kernel gives a process-wide signal to the first thread even while
	// it sleeps uninterruptibly; if that thread were the one writing to the
	// frozen filesystem, SIGTERM would wait for the thaw.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid())); err == nil {
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "D" {
			t.Errorf("the agent's first thread sleeps in the frozen filesystem; SIGTERM would wait for it")
		}
	}
	_ = unix.Kill(p.Pid(), unix.SIGTERM)
	deadline := time.Now().Add(30 * time.Second) // the unit's TimeoutStopSec
	for !strings.Contains(e.logText(), "stopped; every mount stays in place") {
		if time.Now().After(deadline) {
			t.Fatalf("SIGTERM: the agent did not stop its work within the unit's stop timeout")
		}
		time.Sleep(50 * time.Millisecond)
	}
	thaw()
	if exited, _ := p.Wait(30 * time.Second); !exited {
		t.Fatal("agent did not exit after the thaw")
	}
	e.forget()
	e.start()
	e.waitReady("a", "b")
}

package e2e

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/api"
)

// For every operation kind, SIGKILL right after its intent is durable and
// right after the kernel acted but before the outcome is recorded; the
// restarted agent converges with nothing leaked or doubled. The reboot
// variant loses every mount and loop device too, as a power cut does,
// while the state file stays: a filesystem made before it is kept.
// The formatted variant starts from images that hold a filesystem
// already: its mount_device writes no intent (the kernel shows its
// outcome by a path of ours), so "after-intent" is only "before the
// kernel", and nothing on disk tells the restart what was under way.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	setup := []string{"attach", "format", "mount_device", "publish"}
	teardown := []string{"unpublish", "unmount_device", "detach"}
	var ops []string
	for _, op := range append(setup, teardown...) {
		ops = append(ops, op)
		if op == "mount_device" || op == "publish" {
			ops = append(ops, op+"+formatted")
		}
	}
	for _, op := range ops {
		op, formatted := strings.CutSuffix(op, "+formatted")
		for _, when := range []string{"after-intent", "after-kernel", "after-intent+reboot", "after-kernel+reboot"} {
			when, reboot := strings.CutSuffix(when, "+reboot")
			point := op + ":" + when
			isSetup := !slices.Contains(teardown, op)
			name := point
			if formatted {
				name += "+formatted"
			}
			if reboot {
				name += "+reboot"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel() // an env, and so an agent and images, of its own
				e := newEnv(t)
				// One operation at a time: the killed one is the last started.
				e.extraArgs = []string{"--parallel", "1"}
				if formatted {
					e.formattedImages("vol", "other")
				}
				e.volume("vol", "ext4", "64Mi", "a", "b:ro")
				e.volume("other", "ext4", "64Mi", "other")
				if isSetup {
					e.start("VOLUMED_CRASH_AT=" + point)
				} else {
					e.start()
					e.waitReady("vol", "other")
					e.stop()
					e.remove("vol.yaml")
					e.start("VOLUMED_CRASH_AT=" + point)
				}
				if !e.waitExit(90 * time.Second) {
					t.Fatalf("agent did not die of SIGKILL at %s", point)
				}
				before := e.mountIDs()
				uuid := fsUUID(t, filepath.Join(e.images, "vol.img"))
				if reboot {
					e.reboot()
					before = nil
				}
				e.start()
				if isSetup {
					e.waitReady("vol", "other")
					e.assertConverged(map[string][]string{"vol": {"a", "b"}, "other": {"other"}})
				} else {
					e.waitGone("vol")
					e.waitReady("other")
					e.assertConverged(map[string][]string{"other": {"other"}}, "vol")
					for _, p := range []string{e.target("a"), e.target("b")} {
						if n := len(e.mounts()[p]); n != 0 {
							t.Errorf("%s still mounted %d times after teardown", p, n)
						}
					}
				}
				if isSetup && uuid != "" {
					if got := fsUUID(t, filepath.Join(e.images, "vol.img")); got != uuid {
						t.Errorf("filesystem made again: UUID %s -> %s", uuid, got)
					}
				}
				// The operation that completed in the kernel before the kill
				// is not done again by the restarted agent.
				if !reboot && when == "after-kernel" && op != "publish" && op != "unpublish" {
					victim := crashedVolume(t, e.logText(), op)
					st, err := e.status()
					if err != nil {
						t.Fatal(err)
					}
					if v := find(st, victim); v != nil {
						for _, ev := range v.Events {
							if ev.Op == op {
								t.Errorf("%s: %s redone after restart: %+v", victim, op, ev)
							}
						}
					}
				}
				// What was in place before the restart was adopted, not redone.
				after := e.mountIDs()
				for p, ids := range before {
					if len(after[p]) > 0 && !reflect.DeepEqual(ids, after[p]) {
						t.Errorf("%s: mount redone after restart (%v -> %v)", p, ids, after[p])
					}
				}
			})
		}
	}
}

// A storm: 20 volumes, SIGKILL at random instants during convergence,
// then again during the teardown of some; in the end every wanted volume
// is Ready and mounted exactly once, every removed one fully gone.
func TestCrashStorm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 20
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("v%02d", i)
		names = append(names, name)
		e.volume(name, "ext4", "32Mi", name, name+"-ro:ro")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rounds := 0
	storm := func(k int) {
		for i := 0; i < k; i++ {
			e.start()
			time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
			e.kill()
			rounds++
		}
	}
	storm(10)
	e.start()
	e.waitReady(names...)
	want := map[string][]string{}
	for _, name := range names {
		want[name] = []string{name, name + "-ro"}
	}
	e.assertConverged(want)
	e.kill()

	removed := names[:6]
	for _, name := range removed {
		e.remove(name + ".yaml")
		delete(want, name)
	}
	storm(6)
	e.start()
	for _, name := range removed {
		e.waitGone(name)
	}
	e.waitReady(names[6:]...)
	e.assertConverged(want, removed...)
	t.Logf("survived %d SIGKILL rounds", rounds)
}

// A damaged state file is moved aside, reported, and the state rebuilt
// from the kernel: the volumes are adopted without a remount.
func TestDamagedStateFile(t *testing.T) {
	t.Parallel()
	damages := map[string]func(t *testing.T, p string){
		"random-bytes": func(t *testing.T, p string) {
			fi, _ := os.Stat(p)
			b := make([]byte, fi.Size())
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range b {
				b[i] = byte(rng.UintN(256))
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"truncated-8k": func(t *testing.T, p string) {
			if err := os.Truncate(p, 8<<10); err != nil {
				t.Fatal(err)
			}
		},
		// bbolt allocates ahead, so half of the file can still hold every
		// page in use; cut to half of the used extent so it really hurts.
		"truncated-half": func(t *testing.T, p string) {
			if err := os.Truncate(p, usedExtent(t, p)/2); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			for i := 0; i < 3; i++ {
				e.volume(fmt.Sprintf("d%d", i), "ext4", "32Mi", fmt.Sprintf("d%d", i))
			}
			e.start()
			e.waitReady("d0", "d1", "d2")
			e.stop()
			before := e.mountIDs()
			loopsBefore := e.loops()
			db := filepath.Join(e.state, "state.db")
			damage(t, db)
			e.start()
			st := e.waitReady("d0", "d1", "d2")
			if st.StateRecovery == "" {
				t.Error("status does not report the state file recovery")
			}
			aside, _ := filepath.Glob(db + ".corrupt-*")
			if len(aside) != 1 {
				t.Errorf("damaged file not kept aside: %v", aside)
			}
			if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
				t.Errorf("mounts redone after state loss:\n before %v\n after  %v", before, after)
			}
			if after := e.loops(); !reflect.DeepEqual(loopsBefore, after) {
				t.Errorf("loop devices changed after state loss: %v -> %v", loopsBefore, after)
			}
			// The rebuilt state knows the volumes are ours: removal tears down.
			e.remove("d1.yaml")
			e.waitGone("d1")
			e.assertConverged(map[string][]string{"d0": {"d0"}, "d2": {"d2"}}, "d1")
		})
	}
}

// Restart after SIGTERM redoes nothing: same mount IDs, same loop
// devices, no operation run.
func TestRestartRedoesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.volume("r1", "ext4", "32Mi", "r1", "r1-ro:ro")
	e.volume("r2", "xfs", "320Mi", "r2")
	e.start()
	e.waitReady("r1", "r2")
	before, loopsBefore := e.mountIDs(), e.loops()
	e.stop()
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Fatalf("SIGTERM changed mounts: %v -> %v", before, after)
	}
	e.start()
	st := e.waitReady("r1", "r2")
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Errorf("restart changed mounts: %v -> %v", before, after)
	}
	if after := e.loops(); !reflect.DeepEqual(loopsBefore, after) {
		t.Errorf("restart changed loop devices: %v -> %v", loopsBefore, after)
	}
	for _, v := range st.Volumes {
		if len(v.Events) != 0 {
			t.Errorf("%s: operations ran after a clean restart: %+v", v.Name, v.Events)
		}
	}
	_ = api.PhaseReady
}

// usedExtent reads bbolt's meta pages: the newest one's high-water page
// id times the page size is how much of the file is in use.
func usedExtent(t *testing.T, p string) int64 {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	pageSize := int64(le.Uint32(b[16+8:]))
	var best, txid uint64
	for i := int64(0); i < 2; i++ {
		m := b[i*pageSize+16:]
		if tx := le.Uint64(m[48:]); tx >= txid {
			txid, best = tx, le.Uint64(m[40:])
		}
	}
	return int64(best) * pageSize
}

// crashedVolume finds, in the log of the run that was killed, the volume
// whose operation op the crash point killed, as it said, else the one
// whose op was the last to start.
func crashedVolume(t *testing.T, log, op string) string {
	t.Helper()
	runs := strings.Split(log, "---- start")
	if len(runs) < 2 {
		t.Fatal("no killed run in the log")
	}
	killed := runs[len(runs)-2]
	for _, line := range strings.Split(killed, "\n") {
		if rest, ok := strings.CutPrefix(line, "crash point "+op+":"); ok {
			if _, v, ok := strings.Cut(rest, " volume="); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	victim := ""
	for _, line := range strings.Split(killed, "\n") {
		if strings.Contains(line, `msg="operation started"`) && strings.Contains(line, " operation="+op+" ") {
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "volume="); ok {
					victim = v
				}
			}
		}
	}
	if victim == "" {
		t.Fatalf("no %s started in the killed run", op)
	}
	return victim
}

// A SIGKILL right after a target's bind mount, before its record is
// durable, and then the manifests removed while the agent is down: the
// restarted agent still knows the bind is ours and takes it down. Nothing
// in the kernel names a bind mount's owner, so only a durable intent can
// say so; a publish without one left the bind (and the loop device under
// it) behind.
func TestCrashMidPublishThenRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.extraArgs = []string{"--parallel", "1"}
	e.formattedImages("vol", "other")
	e.volume("vol", "ext4", "64Mi", "a", "b:ro")
	e.volume("other", "ext4", "64Mi", "other")
	e.start("VOLUMED_CRASH_AT=publish:after-kernel")
	if !e.waitExit(90 * time.Second) {
		t.Fatal("agent did not die of SIGKILL at publish:after-kernel")
	}
	bound := 0
	for _, p := range []string{e.target("a"), e.target("b"), e.target("other")} {
		bound += len(e.mounts()[p])
	}
	if bound == 0 {
		t.Fatal("no target mounted at the crash: the test did not reach its point")
	}
	e.remove("vol.yaml")
	e.remove("other.yaml")
	e.start()
	e.waitGone("vol")
	e.waitGone("other")
	for _, p := range []string{e.target("a"), e.target("b"), e.target("other")} {
		if n := len(e.mounts()[p]); n != 0 {
			t.Errorf("%s still mounted %d times after both volumes were removed", p, n)
		}
	}
}

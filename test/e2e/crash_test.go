package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/api"
)

// For every operation kind, SIGKILL right after its intent is durable and
// right after the kernel acted but before the outcome is recorded; the
// restarted agent converges with nothing leaked or doubled.
func TestCrashPoints(t *testing.T) {
	setup := []string{"attach", "format", "mount_device", "publish"}
	teardown := []string{"unpublish", "unmount_device", "detach"}
	for _, op := range append(setup, teardown...) {
		for _, when := range []string{"after-intent", "after-kernel"} {
			point := op + ":" + when
			isSetup := !strings.Contains(strings.Join(teardown, ","), op)
			t.Run(point, func(t *testing.T) {
				e := newEnv(t)
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
		"truncated-half": func(t *testing.T, p string) {
			fi, _ := os.Stat(p)
			if err := os.Truncate(p, fi.Size()/2); err != nil {
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

package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/volumed/volumed/agent/api"
)

// Several volumes converge: ext4 and xfs, each with a read-write and a
// read-only target; the read-only one really refuses writes.
func TestConvergeSeveralVolumes(t *testing.T) {
	e := newEnv(t)
	e.volume("alpha", "ext4", "64Mi", "alpha", "alpha-ro:ro")
	e.volume("beta", "xfs", "320Mi", "beta", "beta-ro:ro")
	e.start()
	st := e.waitReady("alpha", "beta")
	e.assertConverged(map[string][]string{"alpha": {"alpha", "alpha-ro"}, "beta": {"beta", "beta-ro"}})

	for _, name := range []string{"alpha", "beta"} {
		v := find(st, name)
		if !strings.HasPrefix(v.Device, "/dev/loop") || v.StagingPath != e.staging(name) {
			t.Errorf("%s: device %q staging %q", name, v.Device, v.StagingPath)
		}
		if err := os.WriteFile(filepath.Join(e.target(name), "hello"), []byte("hi "+name), 0o644); err != nil {
			t.Fatalf("write through rw target: %v", err)
		}
		got, err := os.ReadFile(filepath.Join(e.target(name+"-ro"), "hello"))
		if err != nil || string(got) != "hi "+name {
			t.Fatalf("read through ro target: %q %v", got, err)
		}
		err = os.WriteFile(filepath.Join(e.target(name+"-ro"), "nope"), nil, 0o644)
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: write through read-only target: %v, want EROFS", name, err)
		}
		for _, p := range []string{e.target(name), e.target(name + "-ro")} {
			m := e.mounts()[p][0]
			for _, o := range []string{"nosuid", "nodev"} {
				if !strings.Contains(","+m.Options+",", ","+o+",") {
					t.Errorf("%s: mount options %q lack %s", p, m.Options, o)
				}
			}
		}
		fs := e.mounts()[e.staging(name)][0].FSType
		want := map[string]string{"alpha": "ext4", "beta": "xfs"}[name]
		if fs != want {
			t.Errorf("%s: staging fstype %s, want %s", name, fs, want)
		}
	}
	// status table and json from the CLI
	out, err := exec.Command(volumedBin, "status", "--socket", e.socket).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "alpha") || !strings.Contains(string(out), "Ready") {
		t.Errorf("volumed status: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if len(line) > 80 {
			t.Errorf("status table line wider than 80 columns: %q", line)
		}
	}
	if out, err := exec.Command(volumedBin, "wait", "alpha", "beta", "--socket", e.socket, "--timeout", "10s").CombinedOutput(); err != nil {
		t.Errorf("volumed wait: %v\n%s", err, out)
	}
}

// Removing a manifest tears its volume down (unpublish, unmount, detach)
// and leaves the others' mounts untouched; the image and its data stay.
// Adding it back mounts the same data without formatting again.
func TestTeardownAndReAdd(t *testing.T) {
	e := newEnv(t)
	e.volume("keep1", "ext4", "64Mi", "keep1")
	e.volume("keep2", "ext4", "64Mi", "keep2")
	e.volume("gone", "ext4", "64Mi", "gone", "gone-ro:ro")
	e.start()
	e.waitReady("keep1", "keep2", "gone")
	if err := os.WriteFile(filepath.Join(e.target("gone"), "data"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := e.mountIDs()

	e.remove("gone.yaml")
	e.waitGone("gone")
	e.assertConverged(map[string][]string{"keep1": {"keep1"}, "keep2": {"keep2"}}, "gone")
	after := e.mountIDs()
	for _, p := range []string{e.target("keep1"), e.target("keep2"), e.staging("keep1"), e.staging("keep2")} {
		if !reflect.DeepEqual(before[p], after[p]) {
			t.Errorf("%s: mount IDs changed from %v to %v by another volume's teardown", p, before[p], after[p])
		}
	}
	for _, p := range []string{e.target("gone"), e.target("gone-ro")} {
		if len(after[p]) != 0 {
			t.Errorf("%s still mounted after removal", p)
		}
	}
	if _, err := os.Stat(filepath.Join(e.images, "gone.img")); err != nil {
		t.Fatalf("image deleted by teardown: %v", err)
	}

	e.volume("gone", "ext4", "64Mi", "gone")
	e.waitReady("gone")
	got, err := os.ReadFile(filepath.Join(e.target("gone"), "data"))
	if err != nil || string(got) != "precious" {
		t.Fatalf("data after re-adding the volume: %q %v (reformatted?)", got, err)
	}
	for _, ev := range find(e.waitReady("gone"), "gone").Events {
		if ev.Op == "format" {
			t.Errorf("re-added volume was formatted again: %+v", ev)
		}
	}
}

// A broken edit of a manifest is refused as a whole and its volume keeps
// its last good state: still mounted, same mount IDs. The problem names
// the file, line and field.
func TestBrokenEditKeepsVolume(t *testing.T) {
	e := newEnv(t)
	good := e.volume("data", "ext4", "64Mi", "data")
	e.start()
	e.waitReady("data")
	before := e.mountIDs()

	broken := strings.Replace(good, "    type: ext4", "    type: ext4\n    mountOptionz: [noatime]", 1)
	e.write("data.yaml", broken)
	st := e.waitFor("problem reported", func(st *api.Status) bool { return len(st.Problems) > 0 })
	p := strings.Join(st.Problems, "\n")
	if !strings.Contains(p, filepath.Join(e.config, "data.yaml")+":") || !strings.Contains(p, "mountOptionz") {
		t.Errorf("problem does not name file and field: %s", p)
	}
	if v := find(st, "data"); v == nil || v.Phase != api.PhaseReady {
		t.Fatalf("volume of a broken manifest not kept Ready: %s", dumpStatus(st))
	}
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Errorf("mounts changed by a broken edit:\n before %v\n after  %v", before, after)
	}
	// The CLI validator says the same.
	out, err := exec.Command(volumedBin, "validate", filepath.Join(e.config, "data.yaml")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "mountOptionz") {
		t.Errorf("validate on the broken file: %v\n%s", err, out)
	}
	e.write("data.yaml", good)
	e.waitFor("problem cleared", func(st *api.Status) bool { return len(st.Problems) == 0 })
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Errorf("mounts changed by fixing the manifest")
	}
}

// A second volume claiming a target already in use is refused; the first
// owner stays mounted.
func TestConflictingTargetRefused(t *testing.T) {
	e := newEnv(t)
	e.volume("first", "ext4", "64Mi", "shared")
	e.start()
	e.waitReady("first")
	before := e.mountIDs()
	e.volume("second", "ext4", "64Mi", "shared")
	st := e.waitFor("conflict reported", func(st *api.Status) bool {
		return strings.Contains(strings.Join(st.Problems, "\n"), "second.yaml")
	})
	if v := find(st, "second"); v != nil {
		t.Errorf("conflicting volume accepted: %+v", v)
	}
	if after := e.mountIDs(); !reflect.DeepEqual(before[e.target("shared")], after[e.target("shared")]) {
		t.Errorf("first owner's mount changed: %v -> %v", before, after)
	}
	if len(e.loops()[filepath.Join(e.images, "second.img")]) != 0 {
		t.Error("refused volume was attached")
	}
}

// A target unmounted behind the agent's back is mounted again at resync.
func TestDriftRepaired(t *testing.T) {
	e := newEnv(t)
	e.resync = "300ms"
	e.volume("data", "ext4", "64Mi", "data")
	e.start()
	e.waitReady("data")
	if err := syscall.Unmount(e.target("data"), 0); err != nil {
		t.Fatal(err)
	}
	e.waitFor("target remounted", func(*api.Status) bool { return len(e.mounts()[e.target("data")]) == 1 })
	e.waitReady("data")
	e.assertConverged(map[string][]string{"data": {"data"}})
}

// A mount someone else made on a wanted target is left alone and
// reported as an error on the volume.
func TestForeignMountOnTargetLeftAlone(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(e.target("taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", e.target("taken"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	e.volume("data", "ext4", "64Mi", "taken")
	e.start()
	v := e.waitPhase("data", api.PhaseError)
	if !strings.Contains(v.LastError, "did not make") {
		t.Errorf("error does not say the mount is foreign: %q", v.LastError)
	}
	ms := e.mounts()[e.target("taken")]
	if len(ms) != 1 || ms[0].FSType != "tmpfs" {
		t.Errorf("foreign tmpfs not left alone: %+v", ms)
	}
	// Removing the manifest must not unmount the foreign tmpfs.
	e.remove("data.yaml")
	e.waitGone("data")
	if ms := e.mounts()[e.target("taken")]; len(ms) != 1 || ms[0].FSType != "tmpfs" {
		t.Errorf("foreign tmpfs touched by teardown: %+v", ms)
	}
}

// waitGaveUp is volumed wait's line for volume gpt that failed on its
// partition table and is being retried.
var waitGaveUp = regexp.MustCompile(`(?m)^\s*gpt: (Error|Attaching|Formatting|Mounting) \(.*partition_table.*; \d+ retries\)$`)

// Images that carry a partition table or a filesystem other than the one
// the manifest wants are never formatted: byte for byte unchanged.
func TestForeignSignaturesUntouched(t *testing.T) {
	e := newEnv(t)
	gpt := e.image("gpt.img", 64<<20)
	sf := exec.Command("sfdisk", "--quiet", gpt)
	sf.Stdin = strings.NewReader("label: gpt\n,\n")
	if out, err := sf.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v %s", err, out)
	}
	xfs := e.image("xfs.img", 320<<20)
	if out, err := exec.Command("mkfs.xfs", "-q", xfs).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v %s", err, out)
	}
	sums := map[string][32]byte{gpt: sha(t, gpt), xfs: sha(t, xfs)}
	e.volume("gpt", "ext4", "64Mi", "gpt")
	e.volume("xfs", "ext4", "320Mi", "xfs")
	e.start()
	vg := e.waitPhase("gpt", api.PhaseError)
	vx := e.waitPhase("xfs", api.PhaseError)
	if !strings.Contains(vg.LastError, "gpt") || !strings.Contains(vx.LastError, "xfs") {
		t.Errorf("errors do not name what was found: %q / %q", vg.LastError, vx.LastError)
	}
	// `volumed wait` gives up with the reason. The phase it shows is the
	// last status it read: Error, or the phase of a retry in flight
	// (Formatting, Mounting: the retry runs with backoff all along), so
	// the reason, the last error kept through the retry, is what is
	// asserted, not one instant's phase word.
	out, err := exec.Command(volumedBin, "wait", "gpt", "--timeout", "500ms", "--socket", e.socket).CombinedOutput()
	if err == nil || !waitGaveUp.Match(out) {
		t.Errorf("volumed wait on a failing volume: %v\n%s\nwant a line matching %s", err, out, waitGaveUp)
	}
	e.stop()
	for p, s := range sums {
		if sha(t, p) != s {
			t.Errorf("%s changed", p)
		}
	}
}

// A loop device someone else attached to a wanted image is not used, not
// attached twice and not detached: an error on the volume, left alone.
func TestForeignLoopDeviceLeftAlone(t *testing.T) {
	e := newEnv(t)
	img := e.image("data.img", 64<<20)
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	e.volume("data", "ext4", "64Mi", "data")
	e.start()
	v := e.waitPhase("data", api.PhaseError)
	if !strings.Contains(v.LastError, dev) || !strings.Contains(v.LastError, "by something other than volumed") {
		t.Errorf("error does not name the foreign device: %q", v.LastError)
	}
	e.remove("data.yaml")
	e.waitGone("data")
	if got := e.loops()[img]; len(got) != 1 || got[0] != dev {
		t.Errorf("foreign loop device touched: %v, want only %s", got, dev)
	}
}

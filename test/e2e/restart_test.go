package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// What changed in the kernel while the agent was down is seen by the
// restart itself, with the resync an hour away: errors ext4 recorded
// (the counter, read for every volume in one batch), a target unmounted
// (the mount table, read once while the manifests load), and a volume's
// mounts and loop device taken down (the loop devices, listed once).
// A restart reads the kernel once for every volume
// (docs/performance.md); each of these checks must still fire.
func TestRestartSeesWhatChangedWhileDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.resync = "1h"
	e.loopManifest("fe", filepath.Join(e.images, "fe.img"), "64Mi", "type: ext4, mountOptions: [errors=continue]")
	e.volume("tg", "ext4", "32Mi", "tg")
	e.volume("dt", "ext4", "32Mi", "dt")
	e.start()
	st := e.waitReady("fe", "tg", "dt")
	fe, dt := find(st, "fe").Device, find(st, "dt").Device
	e.stop()
	e.waitExit(30 * time.Second)

	counter := filepath.Join("/sys/fs/ext4", filepath.Base(fe), "errors_count")
	trigger := filepath.Join(filepath.Dir(counter), "trigger_fs_error")
	if err := os.WriteFile(trigger, []byte("volumed e2e test\n"), 0o200); err != nil {
		t.Fatalf("force an ext4 error (kernel without %s?): %v", trigger, err)
	}
	// errors=continue: the kernel writes the count from a worker, a
	// moment after the error.
	for deadline := time.Now().Add(30 * time.Second); errorsCount(t, counter) < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed 0 after a forced error", counter)
		}
	}
	for _, p := range []string{e.target("tg"), e.target("dt"), e.staging("dt")} {
		if err := unix.Unmount(p, 0); err != nil {
			t.Fatalf("unmount %s: %v", p, err)
		}
	}
	if out, err := exec.Command("losetup", "-d", dt).CombinedOutput(); err != nil {
		t.Fatalf("losetup -d %s: %v %s", dt, err, out)
	}

	e.start()
	e.waitCondition("fe", "FilesystemError", fe, "recorded", "errors")
	e.waitReady("tg", "dt")
	mounts := e.mounts()
	for _, p := range []string{e.target("tg"), e.target("dt")} {
		if len(mounts[p]) == 0 {
			t.Errorf("%s, unmounted while the agent was down, is not mounted again after its restart", p)
		}
	}
}

func errorsCount(t *testing.T, p string) int {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return n
}

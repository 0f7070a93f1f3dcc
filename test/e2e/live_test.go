package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
)

// condition returns the volume's condition of type typ, if any.

func (e *env) hasOptions(p string, opts ...string) bool {
	ms := e.mounts()[p]
	if len(ms) == 0 {
		return false
	}
	have := "," + ms[len(ms)-1].Options + ","
	for _, o := range opts {
		if strings.HasPrefix(o, "-") {
			if strings.Contains(have, ","+o[1:]+",") {
				return false
			}
		} else if !strings.Contains(have, ","+o+",") {
			return false
		}
	}
	return true
}

func (e *env) countLog(s string) int { return strings.Count(e.logText(), s) }

// Mount option edits of a mounted volume take effect without an unmount:
// readOnly and the flags on the target, mountOptions on the staging
// mount. An edit ext4 refuses live stays a PendingChange (the volume is
// Degraded, not Ready), is not tried again and again, and clears when
// the manifest no longer asks for it.
func TestLiveMountOptionEdits(t *testing.T) {
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "300ms"}
	manifest := func(opts string, readOnly, allowSuid bool) {
		e.write("o.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: o}
spec:
  source: {loop: {file: %s, create: {size: 32Mi}}}
  filesystem: {type: ext4, mountOptions: [%s], allowSuid: %v}
  mounts: [{path: %s, readOnly: %v}]
`, filepath.Join(e.images, "o.img"), opts, allowSuid, e.target("o"), readOnly))
	}
	manifest("", false, false)
	e.start()
	e.waitReady("o")
	ids := e.mountIDs()
	tp, sp := e.target("o"), e.staging("o")

	manifest("noatime, noexec, commit=30", true, true)
	e.waitFor("options applied live", func(*api.Status) bool {
		return e.hasOptions(sp, "noatime", "noexec", "-nosuid") && e.hasOptions(tp, "ro", "noexec", "-nosuid", "nodev") &&
			strings.Contains(","+e.mounts()[sp][0].VFSOptions+",", ",commit=30,")
	})
	e.waitReady("o")
	if err := os.WriteFile(filepath.Join(tp, "f"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through a target made readOnly: %v, want EROFS", err)
	}
	if got := e.mountIDs(); fmt.Sprint(got[tp], got[sp]) != fmt.Sprint(ids[tp], ids[sp]) {
		t.Errorf("the edit unmounted: mount IDs %v %v -> %v %v", ids[tp], ids[sp], got[tp], got[sp])
	}

	manifest("noatime, noexec, commit=30, data=journal", true, true)
	c := e.waitCondition("o", "PendingChange", "data=journal")
	for _, w := range []string{"not applied", "ext4 refused a live remount", "next mount", "state: absent"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("PendingChange %q does not say %q", c.Message, w)
		}
	}
	e.waitPhase("o", api.PhaseDegraded)
	tries := e.countLog(`operation=remount`)
	time.Sleep(1500 * time.Millisecond) // five resyncs
	if n := e.countLog(`operation=remount`); n != tries {
		t.Errorf("a refused remount was tried again: %d log lines, then %d", tries, n)
	}
	if v := find(mustStatus(t, e), "o"); v.Phase != api.PhaseDegraded {
		t.Errorf("phase %s with a pending change, want Degraded", v.Phase)
	}

	manifest("noatime, commit=30", false, false)
	e.waitFor("the change is dropped and the rest applied", func(st *api.Status) bool {
		return condition(find(st, "o"), "PendingChange") == nil && find(st, "o").Phase == api.PhaseReady && e.hasOptions(tp, "rw", "nosuid", "-noexec") && e.hasOptions(sp, "nosuid", "-noexec")
	})
	if err := os.WriteFile(filepath.Join(tp, "f"), nil, 0o644); err != nil {
		t.Errorf("write through a target made writable again: %v", err)
	}

	// ext4 keeps commit=30 through a remount that does not name it: that
	// edit waits for the next mount, and says so.
	manifest("noatime", false, false)
	e.waitCondition("o", "PendingChange", "commit=30 cannot be dropped from a mounted filesystem")
}

func mustStatus(t *testing.T, e *env) *api.Status {
	t.Helper()
	st, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Edits that need the volume unmounted (a new image file, a new
// filesystem type) are shown as PendingChange with how to apply them,
// never a silent Ready, and clear when undone.
func TestPendingSourceAndTypeChange(t *testing.T) {
	e := newEnv(t)
	manifest := func(file, fstype string) {
		e.write("p.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: p}
spec:
  source: {loop: {file: %s, create: {size: 320Mi}}}
  filesystem: {type: %s}
  mounts: [{path: %s}]
`, filepath.Join(e.images, file), fstype, e.target("p")))
	}
	manifest("p.img", "ext4")
	e.start()
	e.waitReady("p")

	manifest("other.img", "ext4")
	c := e.waitCondition("p", "PendingChange", "other.img")
	for _, w := range []string{"not applied", filepath.Join(e.images, "p.img") + " is still attached", "state: absent"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("PendingChange %q does not say %q", c.Message, w)
		}
	}
	e.waitPhase("p", api.PhaseDegraded)

	manifest("p.img", "xfs")
	c = e.waitCondition("p", "PendingChange", "filesystem.type xfs not applied")
	if !strings.Contains(c.Message, "holds ext4") {
		t.Errorf("PendingChange %q does not say what the volume holds", c.Message)
	}

	manifest("p.img", "ext4")
	e.waitReady("p")
	if v := find(mustStatus(t, e), "p"); len(v.Conditions) != 0 {
		t.Errorf("conditions after the edit was undone: %+v", v.Conditions)
	}
}

// A target that holds something is not mounted over unless the mount
// says allowNonEmpty; what is there is left as it is.
func TestNonEmptyTargetRefused(t *testing.T) {
	e := newEnv(t)
	tp := e.target("full")
	if err := os.MkdirAll(tp, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(tp, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := func(allow bool) {
		e.write("full.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: full}
spec:
  source: {loop: {file: %s, create: {size: 32Mi}}}
  filesystem: {type: ext4}
  mounts: [{path: %s, allowNonEmpty: %v}]
`, filepath.Join(e.images, "full.img"), tp, allow))
	}
	manifest(false)
	e.start()
	want := fmt.Sprintf("target %s is not empty: mounting would hide 3 entries; set allowNonEmpty: true on the mount to allow it", tp)
	e.waitFor("the refusal", func(st *api.Status) bool {
		v := find(st, "full")
		return v != nil && v.Phase == api.PhaseError && strings.Contains(v.LastError, want)
	})
	if n := len(e.mounts()[tp]); n != 0 {
		t.Fatalf("target mounted %d times over its content", n)
	}

	manifest(true)
	e.waitReady("full")
	if n := len(e.mounts()[tp]); n != 1 {
		t.Errorf("target mounted %d times with allowNonEmpty, want 1", n)
	}
}

// A loop image larger than the free space of the filesystem holding it
// is refused, when created and when grown, unless the manifest opts in.
func TestImageLargerThanFreeSpaceRefused(t *testing.T) {
	e := newEnv(t)
	if err := unix.Mount("tmpfs", e.images, "tmpfs", 0, "size=48m"); err != nil {
		t.Fatal(err)
	}
	manifest := func(size string, overcommit bool) {
		e.write("big.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: big}
spec:
  source: {loop: {file: %s, create: {size: %s, overcommit: %v}}}
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, filepath.Join(e.images, "big.img"), size, overcommit, e.target("big")))
	}
	manifest("64Mi", false)
	e.start()
	refusal := func(msg string) bool {
		return strings.Contains(msg, "source.loop.create.size") && strings.Contains(msg, "free") && strings.Contains(msg, "create.overcommit: true")
	}
	e.waitFor("create refused", func(st *api.Status) bool {
		v := find(st, "big")
		return v != nil && v.Phase == api.PhaseError && refusal(v.LastError)
	})
	if _, err := os.Stat(filepath.Join(e.images, "big.img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the image was made anyway: %v", err)
	}

	manifest("24Mi", false)
	e.waitReady("big")
	manifest("128Mi", false)
	e.waitFor("grow refused", func(st *api.Status) bool {
		c := condition(find(st, "big"), "GrowFailed")
		return c != nil && refusal(c.Message) && find(st, "big").Phase == api.PhaseDegraded
	})
	if fi, err := os.Stat(filepath.Join(e.images, "big.img")); err != nil || fi.Size() != 24<<20 {
		t.Errorf("image after a refused grow: %v %v, want 24 MiB", fi, err)
	}

	manifest("128Mi", true)
	e.waitFor("overcommitted grow", func(st *api.Status) bool {
		fi, err := os.Stat(filepath.Join(e.images, "big.img"))
		return err == nil && fi.Size() == 128<<20 && find(st, "big").Phase == api.PhaseReady
	})
	if v := find(mustStatus(t, e), "big"); len(v.Conditions) != 0 {
		t.Errorf("conditions after the grow: %+v", v.Conditions)
	}
}

// SIGKILL while a live edit is applied: the restarted agent finishes it
// without unmounting anything.
func TestCrashDuringRemount(t *testing.T) {
	for _, when := range []string{"after-intent", "after-kernel"} {
		t.Run(when, func(t *testing.T) {
			e := newEnv(t)
			e.volume("r", "ext4", "32Mi", "r")
			e.start()
			e.waitReady("r")
			e.stop()
			ids := e.mountIDs()
			m := e.volume("r", "ext4", "32Mi", "r:ro")
			e.write("r.yaml", strings.Replace(m, "    type: ext4\n", "    type: ext4\n    mountOptions: [noexec]\n", 1))
			e.start("VOLUMED_CRASH_AT=remount:" + when)
			if !e.waitExit(90 * time.Second) {
				t.Fatal("agent did not die of SIGKILL in the remount")
			}
			e.start()
			e.waitFor("the edit applied after the restart", func(st *api.Status) bool {
				v := find(st, "r")
				return v != nil && v.Phase == api.PhaseReady && e.hasOptions(e.staging("r"), "noexec") && e.hasOptions(e.target("r"), "ro", "noexec")
			})
			if got := e.mountIDs(); fmt.Sprint(got) != fmt.Sprint(ids) {
				t.Errorf("mounts redone: %v -> %v", ids, got)
			}
		})
	}
}

// A mkfs that fails after writing part of a filesystem (mkfs.xfs with a
// protofile naming a missing file writes the superblock first): the
// volume says what is on the device now and what to do, mkfs is not run
// again, nothing is wiped; once the operator has wiped the device and
// fixed the manifest, the volume comes up.
func TestFailedMkfsLeavesFormatRefused(t *testing.T) {
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "300ms"}
	proto := filepath.Join(e.dir, "proto")
	if err := os.WriteFile(proto, []byte("boot\n0 0\nd--755 0 0\nf ---644 0 0 /nonexistent-volumed-src\n$\n$\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(e.images, "half.img")
	manifest := func(mkfsOptions string) {
		e.write("half.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: half}
spec:
  source: {loop: {file: %s, create: {size: 320Mi}}}
  filesystem: {type: xfs, mkfsOptions: [%s]}
  mounts: [{path: %s}]
`, img, mkfsOptions, e.target("half")))
	}
	manifest("-p, " + proto)
	e.start()
	var dev string
	e.waitFor("FormatRefused", func(st *api.Status) bool {
		v := find(st, "half")
		c := condition(v, "FormatRefused")
		dev = v.Device
		return c != nil && v.Phase == api.PhaseError && c.Message == strings.TrimPrefix(v.LastError, "mount_device: ")
	})
	v := find(mustStatus(t, e), "half")
	for _, w := range []string{"it left signatures on " + dev + ": xfs (filesystem, at byte 0)", "volumed wipe --volume half", "will not try again until the manifest changes"} {
		if !strings.Contains(v.LastError, w) {
			t.Errorf("error %q does not say %q", v.LastError, w)
		}
	}
	if v.NextRetryAt != nil {
		t.Errorf("a retry is announced for %v", v.NextRetryAt)
	}
	time.Sleep(1500 * time.Millisecond) // five resyncs
	if n := e.countLog("operation=format"); n != 2 {
		t.Errorf("%d format log lines, want 2 (one start, one failure): mkfs was run again", n)
	}
	if out, err := execOut("blkid", "-p", "-o", "value", "-s", "TYPE", img); err != nil || strings.TrimSpace(string(out)) != "xfs" {
		t.Errorf("what mkfs left was touched: blkid %q %v", out, err)
	}

	// wipefs alone leaves the half-made filesystem's other bytes, which
	// the blank rule sees; what the message says is done: the manifest
	// removed, the image deleted (a loop volume's), the manifest back.
	if out, err := execOut("wipefs", "-a", dev); err != nil {
		t.Fatalf("wipefs: %v\n%s", err, out)
	}
	manifest("")
	e.waitCondition("half", "NotBlank", "holds data")
	e.remove("half.yaml")
	e.waitGone("half")
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	manifest("")
	e.waitReady("half")
	if v := find(mustStatus(t, e), "half"); len(v.Conditions) != 0 {
		t.Errorf("conditions after the fix: %+v", v.Conditions)
	}
}

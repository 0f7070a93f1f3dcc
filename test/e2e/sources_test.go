package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/volumed/volumed/agent/api"
)

// A host directory (created with the manifest's mode and owner) and a
// tmpfs are volumes like any other: staged, published, torn down; the
// directory and its content outlive the volume.
func TestDirectoryAndTmpfsSources(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := filepath.Join(e.dir, "shared", "data")
	e.write("dir.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: shared}
spec:
  source:
    directory: {path: %s, create: {mode: "0750", uid: 1000, gid: 1001}}
  mounts: [{path: %s}]
`, dir, e.target("shared")))
	e.write("tmp.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: scratch}
spec:
  source: {tmpfs: {size: 16Mi}}
  mounts: [{path: %s}]
`, e.target("scratch")))
	e.start()
	st := e.waitReady("shared", "scratch")

	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	sys := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o750 || sys.Uid != 1000 || sys.Gid != 1001 {
		t.Errorf("created directory: mode %v owner %d:%d, want 0750 1000:1001", fi.Mode().Perm(), sys.Uid, sys.Gid)
	}
	if err := os.WriteFile(filepath.Join(e.target("shared"), "f"), []byte("through the target"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "through the target" {
		t.Fatalf("file written through the target is not in the directory: %q %v", b, err)
	}
	m := e.mounts()
	if ms := m[e.target("scratch")]; len(ms) != 1 || ms[0].FSType != "tmpfs" {
		t.Fatalf("tmpfs target: %+v", ms)
	}
	if c := find(st, "scratch").CapacityBytes; c != 16<<20 {
		// usage is read after the first convergence; give it a resync
		e.waitFor("tmpfs capacity", func(st *api.Status) bool { return find(st, "scratch").CapacityBytes == 16<<20 })
	}
	for _, p := range []string{e.target("shared"), e.target("scratch")} {
		if o := m[p][0].Options; !strings.Contains(o, "nosuid") || !strings.Contains(o, "nodev") {
			t.Errorf("%s: options %q lack nosuid,nodev", p, o)
		}
	}

	e.remove("dir.yaml")
	e.remove("tmp.yaml")
	e.waitGone("shared")
	e.waitGone("scratch")
	m = e.mounts()
	for _, p := range []string{e.target("shared"), e.target("scratch"), e.staging("shared"), e.staging("scratch")} {
		if len(m[p]) != 0 {
			t.Errorf("%s still mounted after removal", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "through the target" {
		t.Errorf("the directory's content did not survive the volume's removal: %q %v", b, err)
	}
}

// Raising a loop volume's size grows its image, its loop device and the
// mounted filesystem, with no remount; lowering it never shrinks anything.
func TestOnlineGrowLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "500ms"}
	manifest := func(size string) {
		e.write("g.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: g}
spec:
  source: {loop: {file: %s, create: {size: %s}}}
  filesystem: {type: btrfs, grow: true}
  mounts: [{path: %s}]
`, filepath.Join(e.images, "g.img"), size, e.target("g")))
	}
	manifest("128Mi")
	e.start()
	e.waitReady("g")
	var before int64
	e.waitFor("capacity known", func(st *api.Status) bool { before = find(st, "g").CapacityBytes; return before > 0 })
	ids := e.mountIDs()
	if err := os.WriteFile(filepath.Join(e.target("g"), "keep"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}

	manifest("256Mi")
	st := e.waitFor("capacity grown", func(st *api.Status) bool { return find(st, "g").CapacityBytes > before+100<<20 })
	if fi, err := os.Stat(filepath.Join(e.images, "g.img")); err != nil || fi.Size() != 256<<20 {
		t.Fatalf("image size after growth: %v %v", fi, err)
	}
	if got := e.mountIDs(); fmt.Sprint(got[e.target("g")]) != fmt.Sprint(ids[e.target("g")]) {
		t.Errorf("growth remounted the target: %v -> %v", ids[e.target("g")], got[e.target("g")])
	}
	if b, err := os.ReadFile(filepath.Join(e.target("g"), "keep")); err != nil || string(b) != "data" {
		t.Errorf("data after growth: %q %v", b, err)
	}
	// The capacity comes from statfs (resync), which sees the resize as
	// soon as the filesystem has grown, before the agent logs it: wait
	// for the line itself.
	e.waitFor("the log to say the filesystem was grown", func(*api.Status) bool { return e.countLog("filesystem grown") > 0 })
	grown := find(st, "g").CapacityBytes

	// The 256Mi edit was logged already: wait for this edit's line.
	edits := e.countLog("manifest changed")
	manifest("64Mi")
	e.waitFor("manifest change taken", func(*api.Status) bool { return e.countLog("manifest changed") > edits })
	e.waitReady("g")
	if fi, _ := os.Stat(filepath.Join(e.images, "g.img")); fi.Size() != 256<<20 {
		t.Errorf("a smaller size shrank the image to %d", fi.Size())
	}
	if c := find(e.waitReady("g"), "g").CapacityBytes; c < grown {
		t.Errorf("capacity went down from %d to %d", grown, c)
	}
}

// A Mount may sit inside another volume's target when it says so: it is
// published on top of that target and taken away before it.
func TestNestedTargetsAndSubPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.volume("outer", "ext4", "64Mi", "data")
	e.volume("inner", "ext4", "64Mi")
	e.write("logs.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Mount
metadata: {name: logs}
spec: {volume: inner, path: %s, subPath: app/logs, nestedIn: outer}
`, filepath.Join(e.target("data"), "logs")))
	e.start()
	e.waitReady("outer")
	// The subPath does not exist yet: the Mount waits and says why.
	e.waitFor("subPath error", func(st *api.Status) bool {
		v := find(st, "inner")
		return v != nil && strings.Contains(v.LastError, "app/logs")
	})
	if err := os.MkdirAll(filepath.Join(e.staging("inner"), "app", "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.staging("inner"), "app", "logs", "l"), []byte("log"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitFor("inner ready", func(st *api.Status) bool { return find(st, "inner").Phase == api.PhaseReady })
	m := e.mounts()
	outer, nested := m[e.target("data")], m[filepath.Join(e.target("data"), "logs")]
	if len(outer) != 1 || len(nested) != 1 || nested[0].Parent != outer[0].ID {
		t.Fatalf("nested mount is not on top of the outer target: outer %+v nested %+v", outer, nested)
	}
	if b, err := os.ReadFile(filepath.Join(e.target("data"), "logs", "l")); err != nil || string(b) != "log" {
		t.Fatalf("subPath content through the nested target: %q %v", b, err)
	}
	// Removing both tears down in order, with no busy error.
	e.remove("outer.yaml")
	e.remove("logs.yaml")
	e.remove("inner.yaml")
	e.waitGone("outer")
	e.waitGone("inner")
	if strings.Contains(e.logText(), "busy") {
		t.Errorf("teardown hit a busy target:\n%s", e.logText())
	}
	e.assertConverged(nil, "outer", "inner")
}

// An overlay merges read-only lower directories under a writable upper
// one: writes land in upper, the lower stays as shipped; a restart with
// no state file adopts the mount; removing the volume unmounts it and
// keeps upper.
func TestOverlaySource(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lower := filepath.Join(e.dir, "defaults")
	upper, work := filepath.Join(e.dir, "ov", "upper"), filepath.Join(e.dir, "ov", "work")
	if err := os.MkdirAll(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "app.conf"), []byte("shipped"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.write("cfg.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: cfg}
spec:
  source:
    overlay: {lower: [%s], upper: %s, work: %s}
  mounts: [{path: %s}]
`, lower, upper, work, e.target("cfg")))
	e.start()
	e.waitReady("cfg")

	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
	if got := read(filepath.Join(e.target("cfg"), "app.conf")); got != "shipped" {
		t.Fatalf("app.conf through the target: %q, want the lower layer's", got)
	}
	if err := os.WriteFile(filepath.Join(e.target("cfg"), "app.conf"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := read(filepath.Join(upper, "app.conf")); got != "edited" {
		t.Errorf("upper app.conf: %q, want the edit", got)
	}
	if got := read(filepath.Join(lower, "app.conf")); got != "shipped" {
		t.Errorf("lower app.conf: %q, want it untouched", got)
	}
	m := e.mounts()
	if ms := m[e.staging("cfg")]; len(ms) != 1 || ms[0].FSType != "overlay" {
		t.Fatalf("staging mount: %+v, want one overlay", ms)
	}
	if o := m[e.target("cfg")][0].Options; !strings.Contains(o, "nosuid") || !strings.Contains(o, "nodev") {
		t.Errorf("target options %q lack nosuid,nodev", o)
	}

	ids := e.mountIDs()
	e.restartWithoutState()
	e.waitReady("cfg")
	if got := e.mountIDs(); fmt.Sprint(got[e.staging("cfg")], got[e.target("cfg")]) != fmt.Sprint(ids[e.staging("cfg")], ids[e.target("cfg")]) {
		t.Errorf("restart without state remounted: %v %v -> %v %v", ids[e.staging("cfg")], ids[e.target("cfg")], got[e.staging("cfg")], got[e.target("cfg")])
	}

	e.remove("cfg.yaml")
	e.waitGone("cfg")
	m = e.mounts()
	for _, p := range []string{e.target("cfg"), e.staging("cfg")} {
		if len(m[p]) != 0 {
			t.Errorf("%s still mounted after removal", p)
		}
	}
	if got := read(filepath.Join(upper, "app.conf")); got != "edited" {
		t.Errorf("upper app.conf after removal: %q, want the edit kept", got)
	}
}

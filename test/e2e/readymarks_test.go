package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// readyMarks are the files in the agent's ready dir (--ready-dir; an
// agent on the default socket keeps them in /run/volumed/ready), sorted.
func (e *env) readyMarks() []string {
	e.t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.dir, "ready"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, d := range ents {
		out = append(out, d.Name())
	}
	return out
}

// waitMarks waits for the ready marks to be want: a pass after the one
// that saw the last operation end makes them. The bound is a failure
// bound, not a performance assertion.
func (e *env) waitMarks(want ...string) {
	e.t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(90 * time.Second)
	for !slices.Equal(e.readyMarks(), want) {
		if time.Now().After(deadline) {
			e.t.Fatalf("ready marks %q, want %q", e.readyMarks(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The ready marks volumed-wait@.service tests instead of running volumed
// wait: one per usable volume; gone before a teardown touches the
// kernel; what a killed agent left is removed at the next start, before
// anything else; none once the agent has stopped.
func TestReadyMarks(t *testing.T) {
	e := newEnv(t)
	e.extraArgs = []string{"--ready-dir", filepath.Join(e.dir, "ready")}
	e.formattedImages("alpha", "beta")
	e.volume("alpha", "ext4", "64Mi", "alpha")
	e.volume("beta", "ext4", "64Mi", "beta")
	e.start()
	e.waitReady("alpha", "beta")
	e.waitMarks("alpha", "beta")
	// A clean stop leaves the mounts and takes the marks: with no agent,
	// volumed wait would not call them ready either.
	e.stop()
	e.waitExit(30 * time.Second)
	if m := e.readyMarks(); len(m) != 0 {
		t.Fatalf("ready marks %q after the agent stopped, want none", m)
	}

	// Removed before the teardown's first change to the kernel: the
	// agent dies right before it unmounts beta's target.
	e.start("VOLUMED_CRASH_AT=unpublish:after-intent")
	e.waitMarks("alpha", "beta")
	e.remove("beta.yaml")
	if !e.waitExit(90 * time.Second) {
		t.Fatal("agent did not die at unpublish:after-intent")
	}
	if len(e.mounts()[e.target("beta")]) == 0 {
		t.Fatal("beta's target is not mounted at unpublish:after-intent: the crash point came after the kernel change")
	}
	if m := e.readyMarks(); !slices.Equal(m, []string{"alpha"}) {
		t.Fatalf("ready marks %q when the unpublish of beta starts, want [alpha]", m)
	}

	// Stale marks: the killed agent's alpha (its target now unmounted
	// behind its back) and one of no volume. The next start removes them
	// before it acts: it dies right before it publishes alpha again.
	if err := os.WriteFile(filepath.Join(e.dir, "ready", "ghost"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(e.target("alpha"), 0); err != nil {
		t.Fatal(err)
	}
	e.start("VOLUMED_CRASH_AT=publish:after-intent")
	if !e.waitExit(90 * time.Second) {
		t.Fatal("agent did not die at publish:after-intent")
	}
	if !strings.Contains(e.logText(), "crash point publish:after-intent volume=alpha") {
		t.Fatalf("the agent did not die publishing alpha:\n%s", e.logText())
	}
	if m := e.readyMarks(); len(m) != 0 {
		t.Fatalf("ready marks %q when alpha is published again, want none", m)
	}

	e.start()
	e.waitReady("alpha")
	e.waitGone("beta")
	e.waitMarks("alpha")
}

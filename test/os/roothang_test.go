package ostest

import (
	"sync"
	"testing"
	"time"
)

// consoleRun is a Run of no qemu: its console is what the test feeds it.
func consoleRun(t *testing.T, lines ...string) *Run {
	r := &Run{m: &Machine{t: t, Name: "console"}, kv: map[string]string{}, exited: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	for _, l := range lines {
		r.feed(l)
	}
	return r
}

// A check boot is booted again only when the guest kernel reported a
// hung task before userspace ran the precheck: not when the precheck
// came (whatever follows), and not when nothing came (its Finish fails).
func TestHungBeforeUserspace(t *testing.T) {
	hang := "[  242.1] INFO: task mount:93 blocked for more than 120 seconds."
	for _, c := range []struct {
		name  string
		lines []string
		want  bool
	}{
		{"the precheck ran", []string{"Run /init as init process", precheckMark}, false},
		{"the root's mount hung", []string{"Run /init as init process", hang}, true},
		{"a hang after the precheck", []string{precheckMark, hang}, false},
		{"nothing", []string{"Run /init as init process"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := hungBeforeUserspace(consoleRun(t, c.lines...), 50*time.Millisecond, 10*time.Millisecond); got != c.want {
				t.Errorf("hungBeforeUserspace = %v, want %v", got, c.want)
			}
		})
	}
	t.Run("the precheck comes while it waits", func(t *testing.T) {
		r := consoleRun(t, "Run /init as init process")
		time.AfterFunc(30*time.Millisecond, func() { r.feed(precheckMark) })
		if hungBeforeUserspace(r, time.Minute, 10*time.Millisecond) {
			t.Error("a boot that reached its precheck was taken for hung")
		}
	})
	t.Run("the hang comes while it waits", func(t *testing.T) {
		r := consoleRun(t, "Run /init as init process")
		time.AfterFunc(30*time.Millisecond, func() { r.feed(hang) })
		done := make(chan bool)
		go func() { done <- hungBeforeUserspace(r, time.Minute, 10*time.Millisecond) }()
		select {
		case got := <-done:
			if !got {
				t.Error("a boot whose kernel reported the hang was not taken for hung")
			}
		case <-time.After(30 * time.Second):
			t.Error("still waiting 30 s after the hang was reported")
		}
	})
}

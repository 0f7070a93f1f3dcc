package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/agent/manifest"
)

// Every caller woken by one pass gets the status built once for it; the
// next pass, or a status older than its shelf life, builds another.
func TestStatusWatchBuildsOncePerPass(t *testing.T) {
	var w statusWatch
	var builds atomic.Int32
	build := func() api.Status { return api.Status{Settled: builds.Add(1) > 0} }
	now := time.Unix(1000, 0)
	gen, next := w.next()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); w.status(gen, now, build) }()
	}
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Fatalf("20 callers at one generation built the status %d times, want 1", n)
	}
	select {
	case <-next:
		t.Fatal("woken before any pass")
	default:
	}
	w.passDone()
	select {
	case <-next:
	default:
		t.Fatal("a pass did not wake the callers")
	}
	gen2, _ := w.next()
	w.status(gen2, now, build)
	w.status(gen2, now.Add(statusShelfLife), build)
	if n := builds.Load(); n != 3 {
		t.Fatalf("builds = %d after a pass and a shelf life, want 3", n)
	}
}

// GET /v1/wait answers once the named volume is Ready, woken by the pass
// that follows, not at the end of its window; and at the end of its
// window with the reasons when the volume stays unready.
func TestWaitAnswersAfterThePassThatMadeItReady(t *testing.T) {
	a := sessionAgent(t, &fakeTarget{})
	d := &Desired{Name: "g", Kind: "fake", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4"}}}
	a.manifests.replace(map[string]*Desired{"g": d}, nil)
	c := api.NewClient(serveAPI(t, a))

	st, err := c.WaitReady(context.Background(), []string{"g"}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if why := api.NotReady(st, []string{"g"}); len(why) != 1 {
		t.Fatalf("after its window with nothing attached: %q, want one reason", why)
	}

	type reply struct {
		st  *api.Status
		err error
		at  time.Time
	}
	got := make(chan reply, 1)
	go func() {
		st, err := c.WaitReady(context.Background(), []string{"g"}, time.Minute)
		got <- reply{st, err, time.Now()}
	}()
	time.Sleep(200 * time.Millisecond) // the call is in and waiting
	stagedAt64Mi(t, a, d)
	select {
	case r := <-got:
		t.Fatalf("answered before any pass: %+v %v", r.st, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	passed := time.Now()
	a.waiters.passDone()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if why := api.NotReady(r.st, []string{"g"}); len(why) != 0 || len(r.st.Volumes) != 1 {
		t.Fatalf("after the pass: %q, volumes %+v; want g alone, Ready", why, r.st.Volumes)
	}
	if wait := r.at.Sub(passed); wait > 10*time.Second {
		t.Fatalf("answered %s after the pass: it waited out its window", wait)
	}
}

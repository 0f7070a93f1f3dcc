package agent

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// slowProgram is a source whose Verify, from the drift check on (its
// first call is the start's), runs a slow program: lvm2's lvs under a
// busy host, at the seam where the core calls the driver. It returns
// when released or when its context ends, as a killed program does.
type slowProgram struct {
	*fakeTarget
	calls   atomic.Int32
	entered chan struct{} // closed when the slow call began
	release chan struct{}
}

func (s *slowProgram) Verify(ctx context.Context, at store.Attachment) (string, bool, error) {
	if s.calls.Add(1) == 2 {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return "", false, ctx.Err()
		}
	}
	return at.Device, true, nil
}

// pets counts the WATCHDOG=1 the agent sends.
type pets struct {
	mu sync.Mutex
	n  int
}

func (p *pets) notify(state string) {
	if strings.Contains(state, "WATCHDOG=1") {
		p.mu.Lock()
		p.n++
		p.mu.Unlock()
	}
}

func (p *pets) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// runWithSlowVerify runs an agent whose one recorded volume's drift
// check is slow (slowProgram), petting every 5 ms with a resync every
// 20 ms; stop ends it.
func runWithSlowVerify(t *testing.T, opTimeout time.Duration) (s *slowProgram, p *pets, stop func()) {
	t.Helper()
	st, _, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rec := &store.Volume{Name: "v", Kind: "fake", Attachment: &store.Attachment{Kind: "fake", Device: "/dev/fake-v", Identity: "fake:v", Owned: true}}
	if err := st.Put(rec); err != nil {
		t.Fatal(err)
	}
	s = &slowProgram{fakeTarget: &fakeTarget{}, entered: make(chan struct{}), release: make(chan struct{})}
	p = &pets{}
	a := New(Config{StateDir: t.TempDir(), Store: st, Attachers: map[string]Attacher{"fake": s}, Mounter: &fakeMounter{}, FS: &sizedFS{sizes: map[string]int64{"/dev/fake-v": 64 << 20}},
		Manifests: &manifestsAt{vols: map[string]*manifest.VolumeSpec{"v": {Source: manifest.Source{Kind: "fake"}}}},
		Resync:    20 * time.Millisecond, WatchdogInterval: 5 * time.Millisecond, Notify: p.notify, OpTimeout: opTimeout})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return s, p, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// waitFor waits up to a minute (a bound on a hang, not a speed) for ok.
func waitFor(ok func() bool) bool {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return false
}

// A slow program in a drift check (a fake Verify standing for lvm2's
// lvs at load 25 under emulation) does not stop the watchdog's pets:
// systemd killed the agent in the middle of TestLVMThin's CSI calls
// when a resync's reports ran past WatchdogSec on the reconcile loop.
func TestASlowProgramDoesNotStopTheWatchdog(t *testing.T) {
	s, p, stop := runWithSlowVerify(t, time.Hour)
	defer stop()
	<-s.entered
	before := p.count()
	if !waitFor(func() bool { return p.count() >= before+3 }) {
		t.Error("no WATCHDOG=1 while a drift check's program ran: systemd would kill the agent")
	}
	close(s.release)
}

// That program is bounded as an operation is (--op-timeout): its
// context ends there, and the loop goes on to the next drift check.
func TestASlowProgramIsBoundedByOpTimeout(t *testing.T) {
	s, _, stop := runWithSlowVerify(t, 50*time.Millisecond)
	defer stop()
	<-s.entered
	if !waitFor(func() bool { return s.calls.Load() >= 3 }) {
		t.Error("the drift check's program was not stopped at --op-timeout: the loop waits on it still")
	}
}

// Past its bound, a step that is not back (a program its kill did not
// end, stuck in the kernel) gets no more pets: the loop is stuck, and
// systemd restarts it. Before it, each tick is a pet.
func TestAwaitPetsUntilTheBound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    bool
	}{{"within the bound", time.Hour, true}, {"past the bound", time.Nanosecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			tick := make(chan time.Time)
			p := &pets{}
			a := &Agent{cfg: Config{OpTimeout: tc.timeout}, watchdog: petting{tick: tick, notify: p.notify}}
			ready, release := make(chan struct{}), make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				a.await(context.Background(), func(ctx context.Context) {
					if !tc.want {
						<-ctx.Done() // past its bound, and not back
					}
					close(ready)
					<-release
				})
			}()
			<-ready
			tick <- time.Now()
			tick <- time.Now() // taken once the first tick is handled
			if got := p.count() > 0; got != tc.want {
				t.Errorf("pets while the step ran: %d, want some: %v", p.count(), tc.want)
			}
			close(release)
			<-done
		})
	}
}

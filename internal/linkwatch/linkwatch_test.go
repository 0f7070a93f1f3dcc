package linkwatch

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// guard bounds a wait for a change the kernel has already announced, so
// a broken watcher fails the test instead of hanging it.
const guard = 20 * time.Second

// newNetns makes an anonymous network namespace for the test; it and
// every link in it vanish once the test's handles and sockets close. The
// host's links are never touched.
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	var ns netns.NsHandle
	inNetns(t, netns.None(), func() {
		var err error
		if ns, err = netns.New(); err != nil {
			t.Fatalf("new network namespace: %v", err)
		}
	})
	t.Cleanup(func() { ns.Close() })
	return ns
}

// inNetns runs fn on a thread switched into ns (or left where it is for
// netns.None, for fn to switch), then switches the thread back. A thread
// that cannot be switched back stays locked and dies with the goroutine.
func inNetns(t *testing.T, ns netns.NsHandle, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if ns.IsOpen() {
		if err := netns.Set(ns); err != nil {
			t.Fatal(err)
		}
	}
	fn()
	if err := netns.Set(orig); err != nil {
		t.Fatalf("back to the original network namespace: %v", err)
	}
	runtime.UnlockOSThread()
}

type lab struct {
	t       *testing.T
	h       *netlink.Handle
	changes chan Change
	w       *watcher
	// rescans are allowed only where the test provokes them.
	rescans bool
}

// newLab starts a watcher in a fresh namespace holding a veth pair
// vw0/vw1 (both down). out defaults to queueing every change.
func newLab(t *testing.T, cfg config, out func(Change)) *lab {
	ns := newNetns(t)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vw0"}, PeerName: "vw1"}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	l := &lab{t: t, h: h, changes: make(chan Change, 4096)}
	if out == nil {
		out = func(c Change) { l.changes <- c }
	}
	ctx, cancel := context.WithCancel(context.Background())
	inNetns(t, ns, func() {
		if l.w, err = start(ctx, out, cfg); err != nil {
			t.Fatalf("start: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		<-l.w.stopped
	})
	return l
}

func (l *lab) set(name string, up bool) {
	l.t.Helper()
	link, err := l.h.LinkByName(name)
	if err != nil {
		l.t.Fatal(err)
	}
	if up {
		err = l.h.LinkSetUp(link)
	} else {
		err = l.h.LinkSetDown(link)
	}
	if err != nil {
		l.t.Fatalf("set %s up=%v: %v", name, up, err)
	}
}

// expect waits for a change equal to want (Index ignored), failing on
// changes about links that are not the lab's.
func (l *lab) expect(want Change) Change {
	l.t.Helper()
	timer := time.NewTimer(guard)
	defer timer.Stop()
	for {
		select {
		case c := <-l.changes:
			switch c.Name {
			case "lo", "vw0", "vw1", "":
			default:
				l.t.Fatalf("change about a link outside the namespace: %+v", c)
			}
			if c.Name == "" && !c.Rescan || c.Rescan && c != (Change{Rescan: true}) {
				l.t.Fatalf("malformed change %+v", c)
			}
			if c.Rescan && !l.rescans {
				l.t.Fatalf("rescan without an overflow")
			}
			c2 := c
			c2.Index = 0
			if c2 == want {
				return c
			}
		case <-timer.C:
			l.t.Fatalf("waited %s in vain for %+v", guard, want)
		}
	}
}

func TestUpDownInNetns(t *testing.T) {
	l := newLab(t, config{rcvBuf: rcvBuf, queue: 64}, nil)

	// Loopback never reports carrier: up means "unknown" + RUNNING.
	l.set("lo", true)
	l.expect(Change{Name: "lo", Up: true})

	// A veth end runs only once its peer is up too.
	l.set("vw0", true)
	l.expect(Change{Name: "vw0", Up: false})
	l.set("vw1", true)
	c := l.expect(Change{Name: "vw0", Up: true})
	if link, err := l.h.LinkByName("vw0"); err != nil || c.Index != link.Attrs().Index {
		t.Errorf("vw0 change has index %d, link is %v (%v)", c.Index, link, err)
	}

	l.set("vw0", false)
	l.expect(Change{Name: "vw0", Up: false})
	l.set("vw0", true)
	l.expect(Change{Name: "vw0", Up: true})

	// Losing the peer takes the carrier away.
	l.set("vw1", false)
	l.expect(Change{Name: "vw0", Up: false})
	l.set("vw1", true)
	l.expect(Change{Name: "vw0", Up: true})

	// Deleting one end deletes the pair: both report down.
	vw1, err := l.h.LinkByName("vw1")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.h.LinkDel(vw1); err != nil {
		t.Fatal(err)
	}
	l.expect(Change{Name: "vw0", Up: false})
}

// TestOverflowRescans makes the kernel drop link messages for real: a
// 32 KiB socket buffer (a few dozen messages) and a consumer that stalls
// while the links flap hundreds of times. The watcher must resubscribe, ask for a rescan, and go
// on reporting.
func TestOverflowRescans(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var l *lab
	first := true
	out := func(c Change) {
		if first {
			first = false
			close(entered)
			<-release
		}
		l.changes <- c
	}
	l = newLab(t, config{rcvBuf: 16 << 10, queue: 1}, out)
	l.rescans = true
	released := false
	unblock := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(unblock) // runs before the lab's cleanup waits for the watcher
	l.set("vw1", true)
	l.set("vw0", true)
	<-entered
	for range 100 {
		l.set("vw1", false)
		l.set("vw1", true)
	}
	unblock()

	l.expect(Change{Rescan: true})
	l.set("vw0", false)
	l.expect(Change{Name: "vw0", Up: false})
	l.set("vw0", true)
	l.expect(Change{Name: "vw0", Up: true})
}

func TestOperUp(t *testing.T) {
	const up, running = 0x1, 0x40
	for _, c := range []struct {
		flags uint32
		oper  netlink.LinkOperState
		want  bool
	}{
		{up | running, netlink.OperUp, true},
		{up | running, netlink.OperUnknown, true},
		{up | running, netlink.OperDormant, false},
		{up, netlink.OperUp, false},
		{running, netlink.OperUp, false},
		{up, netlink.OperLowerLayerDown, false},
		{0, netlink.OperDown, false},
	} {
		if got := operUp(c.flags, c.oper); got != c.want {
			t.Errorf("operUp(%#x, %v) = %v, want %v", c.flags, c.oper, got, c.want)
		}
	}
}

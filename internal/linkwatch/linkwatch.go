// Package linkwatch tells the agent when a network link comes up or goes
// down, from rtnetlink link messages, so network volumes on a link that
// came back are reconciled at once instead of at the next periodic pass.
//
// Link messages can be lost (the socket's buffer overflows under a burst
// of changes) and the subscription can fail. Either way the watcher
// reports a Change with Rescan set, after it has subscribed again: the
// consumer must then re-read every link it cares about.
package linkwatch

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Change is a link's new state, or a request to rescan.
type Change struct {
	Name   string
	Index  int
	Up     bool // operationally up: able to carry traffic
	Rescan bool // messages may have been lost: re-read all links; the other fields are zero
}

// config is what tests change.
type config struct {
	rcvBuf int // SO_RCVBUFFORCE of each subscription
	queue  int // link updates buffered between the netlink reader and us
}

// rcvBuf absorbs bursts (a host bringing up many container veths) so
// rescans stay rare; the kernel charges only what is queued.
const rcvBuf = 4 << 20

// Watch subscribes to link changes in the network namespace of the
// calling thread and returns once the subscription is live, so no change
// after it returns is missed. out is called from one goroutine, in order,
// until ctx ends: with each change of a link's Up state (a link's first
// message after a (re)subscription always counts, and a deleted link that
// was not known to be down is reported down) and with rescans. A slow out
// makes the kernel drop messages, which ends in a rescan. The socket's
// buffer is raised past rmem_max, which needs CAP_NET_ADMIN.
func Watch(ctx context.Context, out func(Change)) error {
	_, err := start(ctx, out, config{rcvBuf: rcvBuf, queue: 64})
	return err
}

type watcher struct {
	ns      netns.NsHandle // where every (re)subscription is made
	out     func(Change)
	cfg     config
	up      map[int]bool // last reported state by link index
	stopped chan struct{}
}

func start(ctx context.Context, out func(Change), cfg config) (*watcher, error) {
	// Resubscriptions happen on another thread, which may be in another
	// namespace than the caller's (tests switch theirs): remember it.
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("watch links: current network namespace: %w", err)
	}
	w := &watcher{ns: ns, out: out, cfg: cfg, up: map[int]bool{}, stopped: make(chan struct{})}
	s, err := w.subscribe()
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("watch links: %w", err)
	}
	go w.run(ctx, s)
	return w, nil
}

// subscription is one netlink socket. The library's reader closes
// updates when the socket fails; closing done closes the socket.
type subscription struct {
	updates chan netlink.LinkUpdate
	done    chan struct{}
	errs    chan error
}

func (w *watcher) subscribe() (*subscription, error) {
	s := &subscription{
		updates: make(chan netlink.LinkUpdate, w.cfg.queue),
		done:    make(chan struct{}),
		errs:    make(chan error, 1),
	}
	// The library enters a given namespace with setns(2) even when the
	// thread is in it already, and the shipped unit denies setns
	// (RestrictNamespaces=yes): only a thread elsewhere gets one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ns *netns.NsHandle
	if elsewhere(w.ns) {
		ns = &w.ns
	}
	err := netlink.LinkSubscribeWithOptions(s.updates, s.done, netlink.LinkSubscribeOptions{
		Namespace: ns,
		ErrorCallback: func(err error) {
			select {
			case s.errs <- err:
			default: // one pending error already asks for a rescan
			}
		},
		ReceiveBufferSize:      w.cfg.rcvBuf,
		ReceiveBufferForceSize: true,
	})
	if err != nil {
		close(s.done)
		return nil, err
	}
	return s, nil
}

// elsewhere reports whether the calling thread is in another network
// namespace than ns (or cannot tell).
func elsewhere(ns netns.NsHandle) bool {
	cur, err := netns.Get()
	if err != nil {
		return true
	}
	defer cur.Close()
	return !cur.Equal(ns)
}

// close ends the subscription and waits for the library's reader to
// finish, draining what it still sends so it cannot block forever.
func (s *subscription) close() {
	close(s.done)
	for range s.updates {
	}
}

func (w *watcher) run(ctx context.Context, s *subscription) {
	defer close(w.stopped)
	defer w.ns.Close()
	for {
		select {
		case <-ctx.Done():
			s.close()
			return
		case u, ok := <-s.updates:
			if ok {
				w.update(u)
				continue
			}
			// The library's reader stopped: the socket failed, most
			// likely ENOBUFS after an overflow.
		case err := <-s.errs:
			// Any local process may send to our port; the library drops
			// such messages and says so. Nothing was lost.
			if strings.HasPrefix(err.Error(), "Wrong sender portid") {
				continue
			}
			// A message that could not be decoded, or the socket failing
			// (its reader closes updates next): a change may be lost.
		}
		s.close()
		if s = w.resubscribe(ctx); s == nil {
			return
		}
		w.rescan()
	}
}

func (w *watcher) rescan() {
	clear(w.up)
	w.out(Change{Rescan: true})
}

// resubscribe retries with backoff until it succeeds or ctx ends (nil).
func (w *watcher) resubscribe(ctx context.Context) *subscription {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		s, err := w.subscribe()
		if err == nil {
			return s
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 10*time.Second)
	}
	return nil
}

func (w *watcher) update(u netlink.LinkUpdate) {
	name, idx := u.Link.Attrs().Name, int(u.Index)
	was, known := w.up[idx]
	if u.Header.Type == unix.RTM_DELLINK {
		delete(w.up, idx)
		if !known || was {
			w.out(Change{Name: name, Index: idx})
		}
		return
	}
	up := operUp(u.Flags, u.Link.Attrs().OperState)
	if known && was == up {
		return
	}
	w.up[idx] = up
	w.out(Change{Name: name, Index: idx, Up: up})
}

// operUp reports whether a link can carry traffic: administratively up
// and running (carrier, not dormant), with RFC 2863 state "up", or
// "unknown" for drivers that do not track it (loopback, dummy, tun).
func operUp(flags uint32, oper netlink.LinkOperState) bool {
	if flags&unix.IFF_UP == 0 || flags&unix.IFF_RUNNING == 0 {
		return false
	}
	return oper == netlink.OperUp || oper == netlink.OperUnknown
}

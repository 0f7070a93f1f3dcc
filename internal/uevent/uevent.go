// Package uevent listens to the kernel's device events on a
// NETLINK_KOBJECT_UEVENT socket: a block device appearing, changing size
// or going away wakes the agent instead of a poll.
//
// It reads the kernel's own multicast group, not udev's: events arrive
// before udev has run its rules (so /dev/disk/by-id links may lag), but
// they arrive whether or not udev runs at all, as on a minimal host.
//
// Events can be lost: when the socket's buffer overflows the kernel drops
// them and reports ENOBUFS. The listener then delivers an Event whose
// Action is Overflow, and the consumer rescans what it cares about. Every
// lost event is followed by an Overflow event, so a rescan made on
// receiving it sees every change the lost events announced.
//
// Only the initial network namespace receives device uevents (Linux
// 4.18+); a listener in another namespace hears nothing.
package uevent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Overflow is the Action of the event delivered when the kernel dropped
// events.
const Overflow = "overflow"

// ErrUdevFormat: the message came from udev's monitor (it starts with
// "libudev\0"), not from the kernel.
var ErrUdevFormat = errors.New("udev monitor message, not a kernel uevent")

// Event is one kernel uevent.
type Event struct {
	Action    string // add, remove, change, move, online, offline, bind, unbind; or Overflow
	DevPath   string // under /sys, e.g. /devices/virtual/block/loop0
	Subsystem string // e.g. block
	DevName   string // node name under /dev, e.g. loop0; "" for devices without a node
	DevType   string // e.g. disk, partition
	Env       map[string]string
}

// Parse decodes a kernel uevent: "action@devpath\0KEY=VAL\0…".
func Parse(b []byte) (Event, error) {
	if bytes.HasPrefix(b, []byte("libudev\x00")) {
		return Event{}, ErrUdevFormat
	}
	fields := bytes.Split(b, []byte{0})
	header := string(fields[0])
	action, devpath, ok := strings.Cut(header, "@")
	if !ok || action == "" || !strings.HasPrefix(devpath, "/") {
		return Event{}, fmt.Errorf("uevent header %q is not action@/devpath", clip(header))
	}
	ev := Event{Env: make(map[string]string, len(fields))}
	for _, f := range fields[1:] {
		if len(f) == 0 {
			continue // the kernel ends the message with a NUL
		}
		k, v, ok := strings.Cut(string(f), "=")
		if !ok || k == "" {
			return Event{}, fmt.Errorf("uevent %s: field %q is not KEY=VALUE", clip(header), clip(string(f)))
		}
		ev.Env[k] = v
	}
	// The kernel repeats the header in ACTION and DEVPATH; anything that
	// disagrees with itself is not a kernel message.
	if ev.Env["ACTION"] != action || ev.Env["DEVPATH"] != devpath {
		return Event{}, fmt.Errorf("uevent %s: ACTION=%q DEVPATH=%q disagree with the header",
			clip(header), clip(ev.Env["ACTION"]), clip(ev.Env["DEVPATH"]))
	}
	ev.Action, ev.DevPath = action, devpath
	ev.Subsystem, ev.DevName, ev.DevType = ev.Env["SUBSYSTEM"], ev.Env["DEVNAME"], ev.Env["DEVTYPE"]
	return ev, nil
}

// clip keeps error messages about garbage short.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

const (
	// groupKernel is the multicast group the kernel sends to; udev
	// re-broadcasts processed events on group 2.
	groupKernel = 1
	// rcvBuf is generous so bursts (hundreds of LUNs appearing after a
	// login) are not dropped; the kernel charges only what is queued.
	// udevd asks for 128 MiB; one agent needs less.
	rcvBuf = 16 << 20
	// msgBuf exceeds the kernel's UEVENT_BUFFER_SIZE (2048).
	msgBuf = 8 << 10
)

// Listener delivers the events of one socket.
type Listener struct {
	c   chan Event
	err error // why c was closed; written before close(c)
}

// config is what tests change: a tiny buffer and queue make overflow easy.
type config struct {
	rcvBuf int
	queue  int
}

// Listen opens the socket at once, so no event sent after Listen returns
// is missed, and delivers the events filter accepts (all when filter is
// nil; overflow events always) until ctx ends. The reading goroutine
// closes C when it stops.
func Listen(ctx context.Context, filter func(Event) bool) (*Listener, error) {
	return listen(ctx, filter, config{rcvBuf: rcvBuf, queue: 64})
}

func listen(ctx context.Context, filter func(Event) bool, cfg config) (*Listener, error) {
	f, err := open(cfg.rcvBuf)
	if err != nil {
		return nil, fmt.Errorf("uevent listen: %w", err)
	}
	l := &Listener{c: make(chan Event, cfg.queue)}
	go l.run(ctx, f, filter)
	return l, nil
}

func open(rcvbuf int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	// FORCE passes rmem_max; it needs CAP_NET_ADMIN, else take what
	// rmem_max allows and rely on overflow events.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf); err != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("SO_RCVBUF: %w", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groupKernel}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind: %w", err)
	}
	// Through os.File the fd joins Go's poller: reads park the goroutine,
	// and Close wakes a pending read.
	return os.NewFile(uintptr(fd), "uevent"), nil
}

// C delivers events. It is closed when ctx ends or the socket fails
// (see Err).
func (l *Listener) C() <-chan Event { return l.c }

// Err reports why C was closed: nil when ctx ended, the socket error
// otherwise. Call it only after C is closed.
func (l *Listener) Err() error { return l.err }

func (l *Listener) run(ctx context.Context, f *os.File, filter func(Event) bool) {
	defer close(l.c)
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	rc, err := f.SyscallConn()
	if err != nil {
		l.err = err
		return
	}
	buf := make([]byte, msgBuf)
	for {
		ev, ok, err := receive(rc, buf)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.err = fmt.Errorf("uevent receive: %w", err)
			return
		}
		if ev.Action == Overflow {
			err := drain(rc, buf)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				l.err = fmt.Errorf("uevent receive: %w", err)
				return
			}
		} else if !ok || (filter != nil && !filter(ev)) {
			continue
		}
		select {
		case l.c <- ev:
		case <-ctx.Done():
			return
		}
	}
}

// drain discards what the socket holds. After an overflow the kernel
// marks the socket congested and drops every event, without another
// ENOBUFS, until its queue is empty; the queued events predate the
// consumer's rescan anyway. Draining before the overflow event is
// delivered means any event lost after it is reported again.
func drain(rc syscall.RawConn, buf []byte) error {
	var derr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			switch err {
			case nil, unix.EINTR, unix.ENOBUFS:
			case unix.EAGAIN:
				return true
			default:
				derr = err
				return true
			}
		}
	})
	if err != nil {
		return err
	}
	return derr
}

// receive reads one message. ok is false for a message to skip: not from
// the kernel, or not a kernel uevent.
func receive(rc syscall.RawConn, buf []byte) (ev Event, ok bool, err error) {
	var (
		n    int
		from unix.Sockaddr
		rerr error
	)
	err = rc.Read(func(fd uintptr) bool {
		// MSG_TRUNC: n is the datagram's full length, to spot a cut one.
		n, from, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_TRUNC)
		return rerr != unix.EAGAIN
	})
	switch {
	case err != nil:
		return Event{}, false, err
	case rerr == unix.ENOBUFS:
		return Event{Action: Overflow}, true, nil
	case rerr == unix.EINTR:
		return Event{}, false, nil
	case rerr != nil:
		return Event{}, false, rerr
	case n > len(buf):
		// Cut short: the event is lost, which the consumer must hear.
		return Event{Action: Overflow}, true, nil
	}
	// Any local process with CAP_NET_ADMIN can send to the group; only the
	// kernel (port id 0) is believed.
	if sa, isNL := from.(*unix.SockaddrNetlink); !isNL || sa.Pid != 0 {
		return Event{}, false, nil
	}
	ev, err = Parse(buf[:n])
	return ev, err == nil, nil
}

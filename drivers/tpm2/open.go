package tpm2

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/google/go-tpm/tpm2/transport"
	"golang.org/x/sys/unix"
)

// DefaultDevice is the kernel's TPM2 resource manager: it lets several
// programs use the TPM at once and flushes what a closed file left loaded.
const DefaultDevice = "/dev/tpmrm0"

// commandTimeout bounds one command when ctx has no earlier deadline: a
// TPM's slowest commands (an RSA key generation) take seconds, never
// minutes.
const commandTimeout = 2 * time.Minute

// Open opens a TPM2: a character device (/dev/tpmrm0), or a unix socket
// that speaks raw TPM2 commands (a software TPM: swtpm socket --server
// type=unixio). Every command of the returned TPM gives up when ctx ends;
// Close stops watching ctx.
func Open(ctx context.Context, path string) (*TPM, error) {
	if path == "" {
		path = DefaultDevice
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open TPM2: %w", err)
	}
	var c conn
	switch {
	case fi.Mode()&os.ModeSocket != 0:
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		nc, err := d.DialContext(dctx, "unix", path)
		if err != nil {
			return nil, fmt.Errorf("open TPM2 socket %s: %w", path, err)
		}
		c = framedConn{nc}
	case fi.Mode()&os.ModeCharDevice != 0:
		// Non-blocking: the kernel then runs each command on its own
		// and says by poll when the response is there, so a wait can
		// be given up.
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil, fmt.Errorf("open TPM2 %s: %w", path, err)
		}
		c = &device{fd: fd}
	default:
		return nil, fmt.Errorf("open TPM2 %s: not a character device or a socket (%s)", path, fi.Mode())
	}
	s := &stream{c: c, ctx: ctx}
	s.stop = context.AfterFunc(ctx, func() {
		// Wake a blocked exchange now.
		_ = c.SetDeadline(time.Unix(1, 0))
	})
	return New(retrying{s, ctx}), nil
}

// conn sends one command and returns its response, giving up at the
// deadline.
type conn interface {
	exchange(cmd []byte) ([]byte, error)
	SetDeadline(time.Time) error
	Close() error
}

// stream is a TPM open for commands, one at a time, each bounded by the
// context.
type stream struct {
	mu   sync.Mutex
	c    conn
	ctx  context.Context
	stop func() bool
}

var _ transport.TPMCloser = (*stream)(nil)

// maxResponse bounds what a (possibly confused) peer can make us
// allocate; TPM2 responses are at most a few KiB (4096 for the kernel's
// driver).
const maxResponse = 1 << 16

func (s *stream) Send(cmd []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(commandTimeout)
	ctxDeadline := false
	if d, ok := s.ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ctxDeadline = d, true
	}
	if err := s.c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	rsp, err := s.c.exchange(cmd)
	switch {
	case err == nil:
	case s.ctx.Err() != nil:
		return nil, fmt.Errorf("TPM2 command: %w", s.ctx.Err())
	case ctxDeadline && errors.Is(err, os.ErrDeadlineExceeded):
		// The socket's timer can fire a moment before the context's.
		return nil, fmt.Errorf("TPM2 command: %w", context.DeadlineExceeded)
	}
	return rsp, err
}

// framedConn is a socket: a byte stream, where the response's 10-byte
// header says how much follows.
type framedConn struct{ net.Conn }

func (c framedConn) exchange(cmd []byte) ([]byte, error) {
	if _, err := c.Write(cmd); err != nil {
		return nil, fmt.Errorf("send TPM2 command: %w", err)
	}
	hdr := make([]byte, 10)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, fmt.Errorf("read TPM2 response: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[2:6])
	if n < 10 || n > maxResponse {
		return nil, errors.New("TPM2 response of an impossible size")
	}
	rsp := make([]byte, n)
	copy(rsp, hdr)
	if _, err := io.ReadFull(c, rsp[10:]); err != nil {
		return nil, fmt.Errorf("read TPM2 response: %w", err)
	}
	return rsp, nil
}

// device is the kernel's TPM character device in non-blocking mode: a
// write queues the command, poll says when its response can be read,
// whole, in one read. The wait is polled in slices so that a deadline
// moved by another goroutine (the context's end) is seen.
type device struct {
	fd       int
	mu       sync.Mutex
	deadline time.Time
}

func (d *device) SetDeadline(t time.Time) error {
	d.mu.Lock()
	d.deadline = t
	d.mu.Unlock()
	return nil
}

func (d *device) expired() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.deadline.IsZero() && time.Now().After(d.deadline)
}

func (d *device) exchange(cmd []byte) ([]byte, error) {
	if _, err := unix.Write(d.fd, cmd); err != nil {
		return nil, fmt.Errorf("send TPM2 command: %w", err)
	}
	for {
		if d.expired() {
			// The command runs on in the kernel; closing the file
			// (the caller's next step) discards its response.
			return nil, fmt.Errorf("read TPM2 response: %w", os.ErrDeadlineExceeded)
		}
		fds := []unix.PollFd{{Fd: int32(d.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 50)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("wait for the TPM2 response: %w", err)
		}
		if n > 0 {
			break
		}
	}
	buf := make([]byte, maxResponse)
	n, err := unix.Read(d.fd, buf)
	if err != nil {
		return nil, fmt.Errorf("read TPM2 response: %w", err)
	}
	if n < 10 || int(binary.BigEndian.Uint32(buf[2:6])) != n {
		return nil, errors.New("TPM2 response of an impossible size")
	}
	return buf[:n], nil
}

func (d *device) Close() error { return unix.Close(d.fd) }

func (s *stream) Close() error {
	s.stop()
	return s.c.Close()
}

// retrying resends a command the TPM answered with a warning that asks
// for it (TPM_RC_RETRY, _YIELDED, _TESTING: busy with self tests or
// another command), for up to about 10 s.
type retrying struct {
	transport.TPMCloser
	ctx context.Context
}

func (r retrying) Send(cmd []byte) ([]byte, error) {
	delay := 10 * time.Millisecond
	for i := 0; ; i++ {
		rsp, err := r.TPMCloser.Send(cmd)
		if err != nil || len(rsp) < 10 || i == 20 {
			return rsp, err
		}
		switch binary.BigEndian.Uint32(rsp[6:10]) {
		case 0x922, 0x908, 0x90A: // RETRY, YIELDED, TESTING
			select {
			case <-r.ctx.Done():
				return nil, fmt.Errorf("TPM2 command: %w", r.ctx.Err())
			case <-time.After(delay):
			}
			delay = min(2*delay, time.Second)
		default:
			return rsp, nil
		}
	}
}

package tpm2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

// DefaultDevice is the kernel's TPM2 resource manager: it lets several
// programs use the TPM at once and flushes what a closed file left loaded.
const DefaultDevice = "/dev/tpmrm0"

// Open opens a TPM2: a character device (/dev/tpmrm0), or a unix socket
// that speaks raw TPM2 commands (a software TPM: swtpm socket --server
// type=unixio).
func Open(path string) (*TPM, error) {
	if path == "" {
		path = DefaultDevice
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open TPM2: %w", err)
	}
	if fi.Mode()&os.ModeSocket != 0 {
		c, err := net.DialTimeout("unix", path, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("open TPM2 socket %s: %w", path, err)
		}
		return New(retrying{&stream{c: c}}), nil
	}
	t, err := linuxtpm.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open TPM2 %s: %w", path, err)
	}
	return New(retrying{t}), nil
}

// retrying resends a command the TPM answered with a warning that asks
// for it (TPM_RC_RETRY, _YIELDED, _TESTING: busy with self tests or
// another command), for up to about 10 s.
type retrying struct{ transport.TPMCloser }

func (r retrying) Send(cmd []byte) ([]byte, error) {
	delay := 10 * time.Millisecond
	for i := 0; ; i++ {
		rsp, err := r.TPMCloser.Send(cmd)
		if err != nil || len(rsp) < 10 || i == 20 {
			return rsp, err
		}
		switch binary.BigEndian.Uint32(rsp[6:10]) {
		case 0x922, 0x908, 0x90A: // RETRY, YIELDED, TESTING
			time.Sleep(delay)
			delay = min(2*delay, time.Second)
		default:
			return rsp, nil
		}
	}
}

// stream sends commands over a byte stream: a response is a 10-byte
// header whose size field says how much follows.
type stream struct {
	mu sync.Mutex
	c  net.Conn
}

var _ transport.TPMCloser = (*stream)(nil)

// maxResponse bounds what a (possibly confused) peer can make us
// allocate; TPM2 responses are at most a few KiB.
const maxResponse = 1 << 16

func (s *stream) Send(cmd []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.c.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil {
		return nil, err
	}
	if _, err := s.c.Write(cmd); err != nil {
		return nil, fmt.Errorf("send TPM2 command: %w", err)
	}
	hdr := make([]byte, 10)
	if _, err := io.ReadFull(s.c, hdr); err != nil {
		return nil, fmt.Errorf("read TPM2 response: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[2:6])
	if n < 10 || n > maxResponse {
		return nil, errors.New("TPM2 response of an impossible size")
	}
	rsp := make([]byte, n)
	copy(rsp, hdr)
	if _, err := io.ReadFull(s.c, rsp[10:]); err != nil {
		return nil, fmt.Errorf("read TPM2 response: %w", err)
	}
	return rsp, nil
}

func (s *stream) Close() error { return s.c.Close() }

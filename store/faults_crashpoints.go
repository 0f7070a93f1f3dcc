//go:build crashpoints

package store

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Fault injection for the fault tests (builds with crash points only):
// a state-file write fails as a full, failing or read-only filesystem
// makes it fail, at the commit a test names.
const (
	// FaultEnv names one commit to fail: "OP:STAGE=ERRNO[#N]", e.g.
	// "format:finish=ENOSPC" fails the outcome of the first format;
	// STAGE is begin or finish, ERRNO one of ENOSPC, EIO, EROFS.
	FaultEnv = "VOLUMED_STATE_FAULT"
	// FaultFileEnv names a file: while it exists, every write fails
	// with the errno it holds (ENOSPC when empty), as a state filesystem
	// that is full until space is freed. When FaultEnv's commit fails,
	// the file is created: the filesystem stays full from then on, until
	// the test removes it.
	FaultFileEnv = "VOLUMED_STATE_FAULT_FILE"
)

type faults struct {
	op, stage string
	errno     unix.Errno
	nth       int
	file      string

	mu   sync.Mutex
	hits int
	ops  map[uint64]string
}

func newFaults() *faults {
	f := &faults{file: os.Getenv(FaultFileEnv), nth: 1, ops: map[uint64]string{}}
	spec := os.Getenv(FaultEnv)
	if i := strings.IndexByte(spec, '#'); i >= 0 {
		if n, err := strconv.Atoi(spec[i+1:]); err == nil && n > 0 {
			f.nth = n
		}
		spec = spec[:i]
	}
	point, name, _ := strings.Cut(spec, "=")
	f.op, f.stage, _ = strings.Cut(point, ":")
	f.errno = errnoNamed(name)
	return f
}

func errnoNamed(name string) unix.Errno {
	switch strings.TrimSpace(name) {
	case "EIO", unix.EIO.Error():
		return unix.EIO
	case "EROFS", unix.EROFS.Error():
		return unix.EROFS
	default:
		return unix.ENOSPC
	}
}

// fault returns the error the write op:stage is to fail with, if any.
func (s *Store) fault(op, stage string) error {
	f := s.faults
	if f.file != "" {
		if b, err := os.ReadFile(f.file); err == nil {
			return errnoNamed(string(b))
		}
	}
	if f.op == "" || f.op != op || f.stage != stage {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hits++
	if f.hits != f.nth {
		return nil
	}
	if f.file != "" {
		_ = os.WriteFile(f.file, []byte(f.errno.Error()), 0o600)
	}
	return f.errno
}

func (s *Store) noteOp(id uint64, op string) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.ops[id] = op
}

func (s *Store) opOf(id uint64) string {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.ops[id]
}

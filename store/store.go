// Package store persists volumed's actual state in a bbolt file so that it survives a crash at
// any instant: an operation's intent is made durable before the kernel is touched and replaced
// by its outcome afterwards, in one transaction. A damaged file is moved aside, never deleted,
// and never allowed to crash the agent.
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/volumed/volumed/store/record"
)

// SchemaVersion is the layout of the buckets below; a file with another version is moved aside.
const SchemaVersion = 1

var (
	bucketMeta    = []byte("meta")
	bucketVolumes = []byte("volumes")
	bucketIntents = []byte("intents")
	keySchema     = []byte("schema")
)

var (
	// ErrLocked is returned by Open when another process (or another Store) holds the file.
	ErrLocked = errors.New("state file is in use by another process")
	// ErrClosed is returned by writes on a closed Store.
	ErrClosed = errors.New("store is closed")
)

// The records are declared in store/record, a package of data alone, so
// that the pure decisions (agent/decide) can read them without reaching
// the database; these names keep every caller's spelling.
type (
	Attachment  = record.Attachment
	MountRecord = record.MountRecord
	Refusal     = record.Refusal
	Mapping     = record.Mapping
	Volume      = record.Volume
	Intent      = record.Intent
	Identity    = record.Identity
)

// Options tune Open.
type Options struct {
	// Check verifies a file before bbolt opens it in this process. cmd/volumed passes a function
	// that re-executes its own binary (a hidden subcommand calling CheckFile) so that a bbolt
	// panic or SIGBUS on a damaged file kills only the child. nil: only PrecheckFile runs in-process.
	Check func(path string) error
	// OnCommit, if set, is told how long each durable commit (one fsync'd transaction) took and how
	// many callers it served — for a metric.
	OnCommit func(d time.Duration, callers int)
	Now      func() time.Time // for tests; default time.Now
}

// Recovery is set when a damaged file was moved aside and a fresh one created.
type Recovery struct{ MovedTo, Reason string }

// Store is an open state file. Its methods are safe for concurrent use; concurrent writers share
// fsyncs through one commit goroutine.
type Store struct {
	db       *bbolt.DB
	now      func() time.Time
	onCommit func(time.Duration, int)
	commits  atomic.Uint64
	// flushing: a Flush request is queued and not yet committed.
	flushing atomic.Bool
	// later counts the queued requests nobody waits for (FinishLater).
	later atomic.Int64

	reqs    chan *request
	sendMu  sync.RWMutex // held to send on reqs; Close takes it to set closing
	closing bool
	quit    chan struct{}
	done    chan struct{}
	// faults injects write failures in builds with crash points (the
	// fault tests); nil otherwise.
	faults    *faults
	closeOnce sync.Once
	closeErr  error

	// first is what Open's schema check decoded of every record, which
	// the first Load hands out unless anything was written since (wrote):
	// decoding the state file twice was a share of every restart.
	firstMu sync.Mutex
	first   *loaded
	wrote   atomic.Bool
}

// loaded is the state file's records as decoded.
type loaded struct {
	vols    map[string]*Volume
	intents []Intent
}

// takeFirst is what Open decoded, once, if nothing was written since.
func (s *Store) takeFirst() *loaded {
	s.firstMu.Lock()
	defer s.firstMu.Unlock()
	first := s.first
	s.first = nil
	if s.wrote.Load() {
		return nil
	}
	return first
}

// Open opens (creating if missing, parent dir 0700) the state file. A file that fails
// PrecheckFile, opts.Check, bbolt's Open or the schema check is renamed to
// "<path>.corrupt-<UTC time>" and replaced by a fresh one; the returned *Recovery says so and the
// caller rebuilds from the kernel. A file held by another process is not damage: that is an
// error wrapping ErrLocked and the file is left where it is.
func Open(path string, opts Options) (*Store, *Recovery, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("open state: %w", err)
	}
	// Probe the lock first: a check of a file another agent holds would fail on the lock, and
	// that must not be mistaken for damage.
	if err := ensureUnlocked(path); err != nil {
		return nil, nil, err
	}
	check := opts.Check
	if closedCleanly(path) {
		// The last agent closed this very file (same size and hash):
		// no crash can have torn a write since, so the child check is
		// skipped. The in-process precheck and schema check still run.
		check = nil
	}
	_ = os.Remove(cleanMarker(path))
	db, first, reason, err := openChecked(path, check)
	if err != nil {
		return nil, nil, err
	}
	var rec *Recovery
	if reason != "" {
		moved, err := moveAside(path, now)
		if err != nil {
			return nil, nil, fmt.Errorf("open state %s: damaged (%s) and cannot be moved aside: %w", path, reason, err)
		}
		rec = &Recovery{MovedTo: moved, Reason: reason}
		db, first, reason, err = openChecked(path, opts.Check)
		if err != nil {
			return nil, nil, err
		}
		if reason != "" {
			return nil, nil, fmt.Errorf("open state %s: fresh file unusable: %s", path, reason)
		}
	}
	s := &Store{
		db:       db,
		now:      now,
		onCommit: opts.OnCommit,
		reqs:     make(chan *request, 1024),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		faults:   newFaults(),
		first:    first,
	}
	go s.loop()
	return s, rec, nil
}

// Close stops the commit goroutine (writes still queued get ErrClosed) and closes the file.
// A clean close leaves a marker naming the file's size and SHA-256, so the next Open can skip
// the costly check of a file whose bytes are still the ones it closed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.sendMu.Lock()
		s.closing = true
		s.sendMu.Unlock()
		close(s.quit)
		<-s.done
		path := s.db.Path()
		s.closeErr = s.db.Close()
		if s.closeErr == nil {
			writeCleanMarker(path)
		}
	})
	return s.closeErr
}

// CloseWithin is Close bounded in time: a commit stuck in the kernel (a
// frozen state filesystem) cannot be cancelled, and must not keep the
// agent from exiting. It then returns an error and leaves the file as it
// is; whatever was not committed is resolved at the next start.
func (s *Store) CloseWithin(d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("close state %s: a commit has not returned for %s (frozen or hung state filesystem?); leaving it", s.db.Path(), d)
	}
}

// Commits is the number of durable commits (fsync'd transactions) since Open.
func (s *Store) Commits() uint64 { return s.commits.Load() }

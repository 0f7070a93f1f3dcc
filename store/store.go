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

// Attachment is the device a volume is attached as.
type Attachment struct {
	Driver   string `json:"driver"`
	Device   string `json:"device"`   // e.g. /dev/loop3 — a hint only, never trusted without Identity
	Identity string `json:"identity"` // stable identity, e.g. "loop:/img/a.img@2049:1234"
	Owned    bool   `json:"owned"`    // we created it, so we may tear it down
	// Session is the shared kernel object (iSCSI session, NVMe
	// controller) the attachment rides on; "" if none.
	Session string `json:"session,omitempty"`
	// Pinned: the host booted from it; never torn down.
	Pinned bool `json:"pinned,omitempty"`
	// Source is what the manifest's source named when it was attached
	// (e.g. a loop image's path): an edit to it cannot reach a live
	// attachment, and this lets the agent say so. "" in records written
	// before it was kept.
	Source string `json:"source,omitempty"`
	// Created: volumed made what is on the source: the attach created
	// it (a sparse image file), or volumed wrote a LUKS2 header on it,
	// whose fresh mapping reads as noise, not as zeros. It is blank by
	// this record until its first format or mount, which clear it.
	Created bool `json:"created,omitempty"`
}

// MountRecord is one mount the agent made or adopted.
type MountRecord struct {
	Path     string `json:"path"`
	Device   string `json:"device,omitempty"`
	FSType   string `json:"fsType,omitempty"`
	SubPath  string `json:"subPath,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	MountID  int    `json:"mountID,omitempty"` // hint; verified against mountinfo
	Owned    bool   `json:"owned"`
	// DeviceBytes (staging mounts) is the device's size when its
	// filesystem was last mounted or grown: a larger device now means
	// the filesystem can grow.
	DeviceBytes int64 `json:"deviceBytes,omitempty"`
	// Options are the mount options the mount was made (or last
	// remounted) with, so that a manifest edit to them is seen; nil when
	// unknown (a mount adopted from the kernel, a record written before
	// they were kept).
	Options []string `json:"options,omitempty"`
	// Refused: a live remount to these options failed; it is not tried
	// again until the manifest asks for something else.
	Refused *Refusal `json:"refused,omitempty"`
}

// Refusal is a live change the kernel refused.
type Refusal struct {
	Options []string `json:"options"`
	Error   string   `json:"error"`
}

// Mapping is the dm-crypt mapping an encrypted volume is open as, on
// top of its attachment. Never a key: only which kind of key opened it.
type Mapping struct {
	Name   string `json:"name"`   // device-mapper name, volumed-<volume>
	UUID   string `json:"uuid"`   // the LUKS2 header's UUID
	Device string `json:"device"` // /dev/mapper/<name>: what is formatted and mounted
	// KeyKind is the kind of key that opened it ("file", "tpm2"); ""
	// when it was found open (adopted) and no record said.
	KeyKind string `json:"keyKind,omitempty"`
	// HeaderBytes is how much smaller than the device the mapping is
	// (the LUKS2 header): a device that grows beyond it grows the
	// mapping. 0 when unknown.
	HeaderBytes int64 `json:"headerBytes,omitempty"`
}

// Volume is the recorded actual state of one volume.
type Volume struct {
	Name       string      `json:"name"`
	Driver     string      `json:"driver"`
	Attachment *Attachment `json:"attachment,omitempty"`
	// Mapping is set while an encrypted volume is open.
	Mapping   *Mapping      `json:"mapping,omitempty"`
	Staging   *MountRecord  `json:"staging,omitempty"`
	Targets   []MountRecord `json:"targets,omitempty"`
	UpdatedAt time.Time     `json:"updatedAt"`
}

// Intent is an operation that was started; while it exists its outcome is uncertain.
type Intent struct {
	ID        uint64            `json:"id"`
	Volume    string            `json:"volume"`
	Op        string            `json:"op"`               // attach, encrypt, open, format, mount_device, publish, unpublish, unmount_device, close, detach, grow, remount
	Inputs    map[string]string `json:"inputs,omitempty"` // never secrets
	StartedAt time.Time         `json:"startedAt"`
}

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
	db, reason, err := openChecked(path, check)
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
		db, reason, err = openChecked(path, opts.Check)
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

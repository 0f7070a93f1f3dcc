// Package store persists volumed's actual state in a bbolt file so that it survives a crash at
// any instant: an operation's intent is made durable before the kernel is touched and replaced
// by its outcome afterwards, in one transaction. A damaged file is moved aside, never deleted,
// and never allowed to crash the agent.
package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
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

// Volume is the recorded actual state of one volume.
type Volume struct {
	Name       string        `json:"name"`
	Driver     string        `json:"driver"`
	Attachment *Attachment   `json:"attachment,omitempty"`
	Staging    *MountRecord  `json:"staging,omitempty"`
	Targets    []MountRecord `json:"targets,omitempty"`
	UpdatedAt  time.Time     `json:"updatedAt"`
}

// Intent is an operation that was started; while it exists its outcome is uncertain.
type Intent struct {
	ID        uint64            `json:"id"`
	Volume    string            `json:"volume"`
	Op        string            `json:"op"`               // attach, format, mount_device, publish, unpublish, unmount_device, detach, grow, remount
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

// openChecked returns an open, schema-checked db, or a reason why the file is damaged, or an
// error that is not about damage (lock held, checker unavailable, I/O while initialising).
func openChecked(path string, check func(string) error) (db *bbolt.DB, reason string, err error) {
	fi, statErr := os.Stat(path)
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("open state: %w", statErr)
	}
	// An empty or missing file is one bbolt is about to initialise; there is nothing to check.
	if statErr == nil && fi.Size() > 0 {
		if err := PrecheckFile(path); err != nil {
			return nil, err.Error(), nil
		}
		if check != nil {
			if err := check(path); err != nil {
				if errors.Is(err, ErrCheckUnavailable) {
					return nil, "", fmt.Errorf("open state %s: %w", path, err)
				}
				// The child's read-only open fails if a writer took the file meanwhile.
				if lerr := ensureUnlocked(path); lerr != nil {
					return nil, "", lerr
				}
				return nil, fmt.Sprintf("check: %v", err), nil
			}
		}
	}

	db, reason, err = boltOpen(path)
	if err != nil {
		return nil, "", err
	}
	if db == nil {
		if reason == "" {
			return nil, "", fmt.Errorf("open state %s: %w (another volumed running?)", path, ErrLocked)
		}
		return nil, reason, nil
	}
	if reason, err = initSchema(db); err != nil || reason != "" {
		_ = db.Close()
		return nil, reason, err
	}
	return db, "", nil
}

// boltOpen opens the file with bbolt, turning a panic into a reason. A nil db with an empty
// reason means the lock is held. A file that cannot be opened for writing (a read-only state
// filesystem, no permission) is an error, not damage: moving a healthy file aside would lose it.
func boltOpen(path string) (db *bbolt.DB, reason string, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, reason = nil, fmt.Sprintf("bbolt open panicked: %v", r)
		}
	}()
	// Defence in depth behind PrecheckFile: a fault on the mapping in this goroutine becomes a
	// panic that the recover above turns into a reason.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	// Timeout: a second agent on the same file fails on the flock instead of waiting forever.
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, "", nil
	case errors.Is(err, unix.EROFS):
		return nil, "", fmt.Errorf("open state %s: the state dir %s is read-only (remount it read-write, or give --state-dir a writable place): %w", path, filepath.Dir(path), err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return nil, "", fmt.Errorf("open state %s: not writable by volumed (run as root; check the file's attributes with lsattr): %w", path, err)
	case err != nil:
		return nil, fmt.Sprintf("bbolt open: %v", err), nil
	}
	return db, "", nil
}

// initSchema creates the buckets of a fresh file, and for an existing file verifies the schema
// version and that every record decodes, so that damage inside the data is found here, where the
// file can still be moved aside, rather than in the agent's Load.
func initSchema(db *bbolt.DB) (reason string, err error) {
	fresh := false
	reason = safeView(db, func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bbolt.Bucket) error { empty = false; return nil })
			if !empty {
				return errors.New("not a volumed state file (no meta bucket)")
			}
			fresh = true
			return nil
		}
		if v := string(meta.Get(keySchema)); v != strconv.Itoa(SchemaVersion) {
			return fmt.Errorf("unknown schema version %q (this volumed knows %d)", v, SchemaVersion)
		}
		_, _, err := load(tx)
		return err
	})
	if reason != "" {
		return reason, nil
	}
	// Buckets missing from a known-schema file (or all of them, in a fresh one) are created; this
	// commit is also the first fsync of a new file.
	if !fresh {
		ok := true
		_ = db.View(func(tx *bbolt.Tx) error {
			ok = tx.Bucket(bucketVolumes) != nil && tx.Bucket(bucketIntents) != nil
			return nil
		})
		if ok {
			return "", nil
		}
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketVolumes, bucketIntents} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil {
		return "", fmt.Errorf("initialise state file: %w", err)
	}
	return "", nil
}

// safeView runs fn in a read transaction; an error or a panic (a damaged page) becomes a reason.
func safeView(db *bbolt.DB, fn func(*bbolt.Tx) error) (reason string) {
	defer func() {
		if r := recover(); r != nil {
			reason = fmt.Sprintf("reading state panicked: %v", r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if err := db.View(fn); err != nil {
		return err.Error()
	}
	return ""
}

// ensureUnlocked fails with ErrLocked if any other open file description holds a flock on path
// (bbolt locks exclusively for writers, shared for readers).
func ensureUnlocked(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open state: %w", err)
	}
	defer f.Close() // releases the probe lock
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("open state %s: %w (another volumed running?)", path, ErrLocked)
	}
	if err != nil {
		return fmt.Errorf("open state %s: flock: %w", path, err)
	}
	return nil
}

// moveAside renames the damaged file to a name that does not exist yet and makes the rename
// durable; the bytes are kept for a post-mortem.
func moveAside(path string, now func() time.Time) (string, error) {
	base := path + ".corrupt-" + now().UTC().Format("20060102T150405Z")
	dst := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
			break
		} else if err != nil {
			return "", err
		}
		dst = fmt.Sprintf("%s.%d", base, i)
	}
	if err := os.Rename(path, dst); err != nil {
		return "", err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	return dst, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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

func cleanMarker(path string) string { return path + ".clean" }

// fileStamp names the file's exact content: its size and a SHA-256 of
// its bytes (an mtime alone can miss a write within one clock tick). A
// state file is small; hashing it costs far less than the child check.
func fileStamp(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("%d %x\n", n, h.Sum(nil)), true
}

// writeCleanMarker is best effort: without it the next start checks the file in full.
func writeCleanMarker(path string) {
	if stamp, ok := fileStamp(path); ok {
		_ = os.WriteFile(cleanMarker(path), []byte(stamp), 0o600)
	}
}

func closedCleanly(path string) bool {
	b, err := os.ReadFile(cleanMarker(path))
	stamp, ok := fileStamp(path)
	return err == nil && ok && string(b) == stamp
}

// Load reads every volume record and every leftover intent (sorted by ID).
func (s *Store) Load() (map[string]*Volume, []Intent, error) {
	var (
		vols    map[string]*Volume
		intents []Intent
	)
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		vols, intents, err = load(tx)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("load state: %w", err)
	}
	return vols, intents, nil
}

func load(tx *bbolt.Tx) (map[string]*Volume, []Intent, error) {
	vb, ib := tx.Bucket(bucketVolumes), tx.Bucket(bucketIntents)
	if vb == nil || ib == nil {
		return nil, nil, errors.New("missing bucket")
	}
	vols := map[string]*Volume{}
	err := vb.ForEach(func(k, v []byte) error {
		var vol Volume
		if err := json.Unmarshal(v, &vol); err != nil {
			return fmt.Errorf("volume %q: %w", k, err)
		}
		if vol.Name != string(k) {
			return fmt.Errorf("volume %q: record names %q", k, vol.Name)
		}
		vols[vol.Name] = &vol
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	// Big-endian keys make the cursor order the ID order.
	var intents []Intent
	err = ib.ForEach(func(k, v []byte) error {
		var in Intent
		if len(k) != 8 {
			return fmt.Errorf("intent key %x: not a 64-bit id", k)
		}
		if err := json.Unmarshal(v, &in); err != nil {
			return fmt.Errorf("intent %d: %w", binary.BigEndian.Uint64(k), err)
		}
		in.ID = binary.BigEndian.Uint64(k)
		intents = append(intents, in)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return vols, intents, nil
}

// Begin durably records an intent (fsync'd before it returns) and returns its ID. in.ID is
// ignored; a zero StartedAt is set to now.
func (s *Store) Begin(in Intent) (uint64, error) {
	if in.Volume == "" || in.Op == "" {
		return 0, fmt.Errorf("begin intent: volume and op are required (volume %q, op %q)", in.Volume, in.Op)
	}
	if in.StartedAt.IsZero() {
		in.StartedAt = s.now()
	}
	if err := s.fault(in.Op, "begin"); err != nil {
		return 0, fmt.Errorf("begin %s %s: %w", in.Op, in.Volume, err)
	}
	var id uint64
	err := s.do(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		in.ID = seq
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		if err := b.Put(intentKey(seq), data); err != nil {
			return err
		}
		// A batch that fails is re-run, so only the last run's ID counts.
		id = seq
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("begin %s %s: %w", in.Op, in.Volume, err)
	}
	s.noteOp(id, in.Op)
	return id, nil
}

// Finish atomically, in one durable transaction, deletes the intent and writes the outcome:
// v != nil puts the record v (keyed by v.Name); v == nil deletes the record of volume name.
func (s *Store) Finish(intentID uint64, name string, v *Volume) error {
	return s.finish(intentID, name, v, nil)
}

// FinishLater is Finish without waiting for the fsync: the outcome is
// committed with the current or next batch (and at Close). Losing it in a
// crash is harmless by design — the intent stays, and start-up resolves
// it by probing the kernel — so an operation need not wait for it, and
// the next intent's fsync carries it to disk. A commit that fails (a full
// or failing state filesystem) is not: failed, when set, is told, on the
// commit goroutine, so that the caller keeps the outcome and retries it
// (Settle); it must not block.
func (s *Store) FinishLater(intentID uint64, name string, v *Volume, failed func(error)) error {
	return s.finish(intentID, name, v, failed)
}

// Settle durably resolves intents whose outcome could not be recorded:
// in one transaction it deletes them and writes v, the volume's record as
// it is now (nil deletes it).
func (s *Store) Settle(intentIDs []uint64, name string, v *Volume) error {
	data, err := s.recordData(name, v)
	if err != nil {
		return fmt.Errorf("settle %s: %w", name, err)
	}
	if err := s.fault("", "settle"); err != nil {
		return fmt.Errorf("settle %s: %w", name, err)
	}
	err = s.do(func(tx *bbolt.Tx) error {
		for _, id := range intentIDs {
			if err := tx.Bucket(bucketIntents).Delete(intentKey(id)); err != nil {
				return err
			}
		}
		return putRecord(tx, name, data)
	})
	if err != nil {
		return fmt.Errorf("settle %s: %w", name, err)
	}
	return nil
}

func (s *Store) recordData(name string, v *Volume) ([]byte, error) {
	if v == nil {
		if name == "" {
			return nil, errors.New("no volume name")
		}
		return nil, nil
	}
	if name != "" && name != v.Name {
		return nil, fmt.Errorf("volume %q given a record named %q", name, v.Name)
	}
	_, data, err := s.encode(v)
	return data, err
}

// putRecord writes a record, or deletes it when data is nil.
func putRecord(tx *bbolt.Tx, name string, data []byte) error {
	if data == nil {
		return tx.Bucket(bucketVolumes).Delete([]byte(name))
	}
	return tx.Bucket(bucketVolumes).Put([]byte(name), data)
}

func (s *Store) finish(intentID uint64, name string, v *Volume, later func(error)) error {
	data, err := s.recordData(name, v)
	if err != nil {
		return fmt.Errorf("finish intent %d: %w", intentID, err)
	}
	if v != nil {
		name = v.Name
	}
	fn := func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketIntents).Delete(intentKey(intentID)); err != nil {
			return err
		}
		return putRecord(tx, name, data)
	}
	if ferr := s.fault(s.opOf(intentID), "finish"); ferr != nil {
		fn = func(*bbolt.Tx) error { return ferr }
	}
	if later != nil {
		err = s.send(&request{fn: fn, failed: later})
	} else {
		err = s.do(fn)
	}
	if err != nil {
		return fmt.Errorf("finish intent %d of %s: %w", intentID, name, err)
	}
	return nil
}

// Put writes a record without an intent (reconstruction adopting what it found).
func (s *Store) Put(v *Volume) error {
	if v == nil {
		return errors.New("put volume: nil record")
	}
	name, data, err := s.encode(v)
	if err != nil {
		return fmt.Errorf("put volume: %w", err)
	}
	if err := s.fault("", "put"); err != nil {
		return fmt.Errorf("put volume %s: %w", name, err)
	}
	if err := s.do(func(tx *bbolt.Tx) error { return tx.Bucket(bucketVolumes).Put([]byte(name), data) }); err != nil {
		return fmt.Errorf("put volume %s: %w", name, err)
	}
	return nil
}

// Delete removes a record without an intent (reconstruction forgetting a volume).
func (s *Store) Delete(name string) error {
	if name == "" {
		return errors.New("delete volume: no name")
	}
	if err := s.fault("", "delete"); err != nil {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	if err := s.do(func(tx *bbolt.Tx) error { return tx.Bucket(bucketVolumes).Delete([]byte(name)) }); err != nil {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	return nil
}

// DropIntent removes a resolved intent without touching records.
func (s *Store) DropIntent(id uint64) error {
	if err := s.do(func(tx *bbolt.Tx) error { return tx.Bucket(bucketIntents).Delete(intentKey(id)) }); err != nil {
		return fmt.Errorf("drop intent %d: %w", id, err)
	}
	return nil
}

// Commits is the number of durable commits (fsync'd transactions) since Open.
func (s *Store) Commits() uint64 { return s.commits.Load() }

// encode marshals a record, stamping a zero UpdatedAt on the stored copy only.
func (s *Store) encode(v *Volume) (string, []byte, error) {
	if v.Name == "" {
		return "", nil, errors.New("record has no name")
	}
	c := *v
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = s.now()
	}
	data, err := json.Marshal(&c)
	return c.Name, data, err
}

func intentKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, id)
}

package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/volumed/volumed/internal/crashpoint"
	"github.com/volumed/volumed/store"
)

// State is the actual state of the world: what is attached and mounted,
// as far as volumed knows. Every change goes through Do (an operation
// under a durable intent) or Adopt/Forget (reconstruction), so the store
// always holds either the outcome or an uncertain intent.
type State struct {
	store Store
	now   func() time.Time
	// recorded, when set, is told when a volume's state stops being
	// durable (err != nil: an outcome could not be committed) and when it
	// is durable again (err == nil). It must not block.
	recorded func(name string, err error)
	// yield, when set, is told that an operation of the volume waits for
	// its intent's commit; what it returns is called when the wait ends.
	yield func(name string) (resume func())
	// changed, when set, is told the name of each volume whose record
	// changed, after the change is visible. It must not block.
	changed func(name string)

	mu   sync.Mutex
	vols map[string]*store.Volume
	// versions count the changes to each volume's record, so that a
	// pass can tell that an operation finished after its snapshot.
	versions map[string]uint64
	// unrecorded are the volumes whose record in memory is newer than the
	// one on disk: a commit failed. Their intents stay on disk until
	// Settle records the outcome; the outcome is never dropped.
	unrecorded map[string]*unrecorded
	// waiting: volumes whose operation waits on a state-file commit
	// before it may touch the kernel, since when.
	waiting map[string]time.Time
	// locks serialise the writes of one volume: its operation (Do) and the
	// retry of its unrecorded outcome (Settle) must not interleave, or an
	// older record could be committed after a newer one.
	locks map[string]*sync.Mutex
	// failed is signalled when a commit fails, so that the retry need not
	// poll while everything is recorded.
	failed chan struct{}
	// committed is signalled when an intent is committed: the state
	// file takes writes, so the retry of unrecorded outcomes need not
	// wait out its backoff.
	committed chan struct{}
}

// NewState wraps a store; vols is the reconstructed starting point.
func NewState(st Store, now func() time.Time, vols map[string]*store.Volume) *State {
	if vols == nil {
		vols = map[string]*store.Volume{}
	}
	return &State{store: st, now: now, vols: vols, versions: map[string]uint64{}, unrecorded: map[string]*unrecorded{},
		waiting: map[string]time.Time{}, locks: map[string]*sync.Mutex{}, failed: make(chan struct{}, 1),
		committed: make(chan struct{}, 1)}
}

// OnRecorded sets the hook told when a volume's state stops or starts
// being durable. Set it before the first operation.
func (s *State) OnRecorded(fn func(name string, err error)) { s.recorded = fn }

// OnCommitWait sets the hook told when an operation waits for its
// intent's commit (Executor.Yield). Set it before the first operation.
func (s *State) OnCommitWait(fn func(name string) (resume func())) { s.yield = fn }

// OnChange sets the hook told of each change to a record (the passes
// plan again what it names). Set it before the first change.
func (s *State) OnChange(fn func(name string)) { s.changed = fn }

func (s *State) lockOf(name string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locks[name]
	if l == nil {
		l = &sync.Mutex{}
		s.locks[name] = l
	}
	return l
}

// Snapshot returns a deep copy of every record.
func (s *State) Snapshot() map[string]*store.Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshot()
}

// VersionedSnapshot is Snapshot with each volume's record version (see
// Version), taken together. Only the pass needs the versions: the map
// keeps every volume ever seen, so the other readers (a kernel event,
// the status) do not copy it.
func (s *State) VersionedSnapshot() (map[string]*store.Volume, map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshot(), maps.Clone(s.versions)
}

// VersionedGet is VersionedSnapshot of the volumes named: a copy of the
// record of each that has one, and each one's version.
func (s *State) VersionedGet(names []string) (map[string]*store.Volume, map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := make(map[string]*store.Volume, len(names))
	vers := make(map[string]uint64, len(names))
	for _, n := range names {
		if v := s.vols[n]; v != nil {
			recs[n] = cloneVolume(v)
		}
		vers[n] = s.versions[n]
	}
	return recs, vers
}

func (s *State) snapshot() map[string]*store.Volume {
	out := make(map[string]*store.Volume, len(s.vols))
	for n, v := range s.vols {
		out[n] = cloneVolume(v)
	}
	return out
}

// Version counts the changes made to a volume's record so far: a record
// read at one version is stale once the version moved on.
func (s *State) Version(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[name]
}

// Attachments returns the attachment of every volume but skip through
// driver, without copying the records.
func (s *State) Attachments(skip, kind string) []store.Attachment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Attachment
	for n, v := range s.vols {
		if n != skip && v.Attachment != nil && v.Attachment.Kind == kind {
			out = append(out, *v.Attachment)
		}
	}
	return out
}

// Holder returns the volume other than skip whose record holds the
// attachment identity, or "", without copying the records.
func (s *State) Holder(identity, skip string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, v := range s.vols {
		if n != skip && v.Attachment != nil && v.Attachment.Identity == identity {
			return n
		}
	}
	return ""
}

// Find returns a copy of each record match accepts, without copying the
// others: a kernel event asks about a device or two among every record.
// match runs under the state's lock: it must only look.
func (s *State) Find(match func(*store.Volume) bool) []*store.Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*store.Volume
	for _, v := range s.vols {
		if match(v) {
			out = append(out, cloneVolume(v))
		}
	}
	return out
}

// Get returns a copy of one record, or nil.
func (s *State) Get(name string) *store.Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vols[name]; v != nil {
		return cloneVolume(v)
	}
	return nil
}

// Do runs act as operation op of volume name: the intent is durable
// before act touches the kernel, and act's edits to the record are
// recorded after. act must leave rec describing what is true in the kernel
// now, whether it succeeded or not. The caller (the executor) guarantees
// that one volume has at most one Do at a time.
func (s *State) Do(name, kind, op string, inputs map[string]string, act func(rec *store.Volume) error) error {
	return s.do(name, kind, op, inputs, true, act)
}

// DoNamed is Do without the durable intent, for an operation whose
// every outcome the kernel shows by names that are ours alone, so that
// reconstruction reads it there whenever a crash comes: removing a
// target mount, or making or removing the staging mount
// (staging/<volume>) of a device already formatted. Making a target
// keeps its intent: a bind mount does not name its owner. Its outcome
// rides the next commit; an fsync'd intent cost each volume's teardown
// two of its three waits for a commit, and its start as many.
func (s *State) DoNamed(name, kind, op string, act func(rec *store.Volume) error) error {
	return s.do(name, kind, op, nil, false, act)
}

func (s *State) do(name, kind, op string, inputs map[string]string, durable bool, act func(rec *store.Volume) error) error {
	l := s.lockOf(name)
	l.Lock()
	defer l.Unlock()
	// An earlier outcome that is not durable goes first: the kernel is
	// not touched again while the state file does not know where it is.
	if err := s.settle(name); err != nil {
		return fmt.Errorf("%s %s not started: %w", op, name, err)
	}
	rec := s.Get(name)
	if rec == nil {
		rec = &store.Volume{Name: name, Kind: kind}
	}
	var id uint64 // 0: no intent
	if durable {
		s.mu.Lock()
		s.waiting[name] = s.now()
		s.mu.Unlock()
		resume := func() {}
		if s.yield != nil {
			resume = s.yield(name)
		}
		var err error
		id, err = s.store.Begin(store.Intent{Volume: name, Op: op, Inputs: inputs, StartedAt: s.now()})
		resume()
		s.mu.Lock()
		delete(s.waiting, name)
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("record intent %s %s: %w", op, name, err)
		}
		select {
		case s.committed <- struct{}{}:
		default:
		}
	}
	crashpoint.HitFor(op, "after-intent", name)
	actErr := act(rec)
	crashpoint.HitFor(op, "after-kernel", name)
	rec.UpdatedAt = s.now()
	var out *store.Volume
	if !isEmpty(rec) {
		out = rec
	}
	s.set(name, out)
	// The outcome need not be durable before we go on: the next intent's
	// fsync carries it, and if a crash comes first the intent is still on
	// disk and start-up probes the kernel. Only the intent must be durable
	// before the kernel is touched.
	failed := func(err error) { s.noteUnrecorded(name, id, fmt.Errorf("record outcome of %s: %w", op, err)) }
	record := func() error { return s.store.FinishLater(id, name, out, failed) }
	if !durable {
		record = func() error { return s.store.RecordLater(op, name, out, failed) }
	}
	if err := record(); err != nil {
		// Kept, not dropped: the intent stays on disk, and the outcome in
		// memory until Settle records it.
		failed(err)
	}
	return actErr
}

// Adopt records what reconstruction found (no intent: nothing is done
// to the kernel).
func (s *State) Adopt(v *store.Volume) error {
	if isEmpty(v) {
		return s.Forget(v.Name)
	}
	v.UpdatedAt = s.now()
	s.set(v.Name, cloneVolume(v))
	if err := s.store.Put(v); err != nil {
		s.noteUnrecorded(v.Name, 0, err)
		return err
	}
	return nil
}

// Correct records fixed, a drift check's correction of seen, only if the
// volume's record is still seen: under the volume's lock, so it never
// interleaves with an operation (Do) of the volume, and never undoes
// what one recorded after the check read the record. It reports whether
// it made the correction.
func (s *State) Correct(seen, fixed *store.Volume) (bool, error) {
	l := s.lockOf(seen.Name)
	l.Lock()
	defer l.Unlock()
	if cur := s.Get(seen.Name); cur == nil || !sameRecord(cur, seen) {
		return false, nil
	}
	return true, s.Adopt(fixed)
}

// AdoptKnown is Adopt for start-up: a reconstructed record equal to the
// one the store already holds is only taken into memory, so a restart
// with everything in place writes (and fsyncs) nothing.
func (s *State) AdoptKnown(v, stored *store.Volume) error {
	if stored != nil && !isEmpty(v) && sameRecord(v, stored) {
		s.set(v.Name, v)
		return nil
	}
	if stored == nil && isEmpty(v) {
		return nil
	}
	return s.Adopt(v)
}

// sameRecord compares two records but for when they were written.
func sameRecord(a, b *store.Volume) bool {
	x, y := *a, *b
	x.UpdatedAt, y.UpdatedAt = time.Time{}, time.Time{}
	jx, errx := json.Marshal(x)
	jy, erry := json.Marshal(y)
	return errx == nil && erry == nil && bytes.Equal(jx, jy)
}

// Forget drops a volume's record.
func (s *State) Forget(name string) error {
	s.set(name, nil)
	if err := s.store.Delete(name); err != nil {
		s.noteUnrecorded(name, 0, err)
		return err
	}
	return nil
}

func (s *State) set(name string, v *store.Volume) {
	s.mu.Lock()
	s.versions[name]++
	if v == nil {
		delete(s.vols, name)
	} else {
		s.vols[name] = cloneVolume(v)
	}
	s.mu.Unlock()
	if s.changed != nil {
		s.changed(name)
	}
}

func isEmpty(v *store.Volume) bool {
	return v == nil || (v.Attachment == nil && v.Mapping == nil && v.Staging == nil && len(v.Targets) == 0)
}

func cloneVolume(v *store.Volume) *store.Volume {
	c := *v
	if v.Attachment != nil {
		a := *v.Attachment
		c.Attachment = &a
	}
	if v.Mapping != nil {
		m := *v.Mapping
		c.Mapping = &m
	}
	if v.Staging != nil {
		m := *v.Staging
		c.Staging = &m
	}
	c.Targets = append([]store.MountRecord(nil), v.Targets...)
	return &c
}

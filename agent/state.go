package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
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

	mu   sync.Mutex
	vols map[string]*store.Volume
}

// NewState wraps a store; vols is the reconstructed starting point.
func NewState(st Store, now func() time.Time, vols map[string]*store.Volume) *State {
	if vols == nil {
		vols = map[string]*store.Volume{}
	}
	return &State{store: st, now: now, vols: vols}
}

// Snapshot returns a deep copy of every record.
func (s *State) Snapshot() map[string]*store.Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*store.Volume, len(s.vols))
	for n, v := range s.vols {
		out[n] = cloneVolume(v)
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
func (s *State) Do(name, driver, op string, inputs map[string]string, act func(rec *store.Volume) error) error {
	rec := s.Get(name)
	if rec == nil {
		rec = &store.Volume{Name: name, Driver: driver}
	}
	id, err := s.store.Begin(store.Intent{Volume: name, Op: op, Inputs: inputs, StartedAt: s.now()})
	if err != nil {
		return fmt.Errorf("record intent %s %s: %w", op, name, err)
	}
	crashpoint.Hit(op, "after-intent")
	actErr := act(rec)
	crashpoint.Hit(op, "after-kernel")
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
	if err := s.store.FinishLater(id, name, out); err != nil {
		// The intent stays on disk: a restart resolves it by probing.
		if actErr == nil {
			actErr = fmt.Errorf("record outcome of %s %s: %w", op, name, err)
		}
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
	return s.store.Put(v)
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
	return s.store.Delete(name)
}

func (s *State) set(name string, v *store.Volume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == nil {
		delete(s.vols, name)
		return
	}
	s.vols[name] = cloneVolume(v)
}

func isEmpty(v *store.Volume) bool {
	return v == nil || (v.Attachment == nil && v.Staging == nil && len(v.Targets) == 0)
}

func cloneVolume(v *store.Volume) *store.Volume {
	c := *v
	if v.Attachment != nil {
		a := *v.Attachment
		c.Attachment = &a
	}
	if v.Staging != nil {
		m := *v.Staging
		c.Staging = &m
	}
	c.Targets = append([]store.MountRecord(nil), v.Targets...)
	return &c
}

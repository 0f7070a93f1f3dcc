// Outcomes whose commit failed: kept in memory, with their intents on
// disk, and retried until the state file takes them.

package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/volumed/volumed/store"
)

type unrecorded struct {
	intents []uint64
	err     error
	// failures counts the failed commits, so that Settle can tell one
	// that came while it was writing.
	failures int
}

// noteUnrecorded keeps a failed commit's intent for Settle. It runs on
// the store's commit goroutine.
func (s *State) noteUnrecorded(name string, intent uint64, err error) {
	s.mu.Lock()
	u := s.unrecorded[name]
	if u == nil {
		u = &unrecorded{}
		s.unrecorded[name] = u
	}
	if intent != 0 {
		u.intents = append(u.intents, intent)
	}
	u.err = err
	u.failures++
	s.mu.Unlock()
	select {
	case s.failed <- struct{}{}:
	default:
	}
	if s.recorded != nil {
		s.recorded(name, err)
	}
}

// KeepIntent hands an intent start-up resolved, but could not drop, to
// the retry: it is dropped when the volume's record is next settled.
func (s *State) KeepIntent(name string, intent uint64, err error) {
	s.noteUnrecorded(name, intent, err)
}

// Failed is signalled after a commit failed.
func (s *State) Failed() <-chan struct{} { return s.failed }

// Committed is signalled after an intent was committed.
func (s *State) Committed() <-chan struct{} { return s.committed }

// Unrecorded lists the volumes whose state is not durable yet.
func (s *State) Unrecorded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.unrecorded))
	for n := range s.unrecorded {
		out = append(out, n)
	}
	return out
}

// Waiting returns since when the operation of each volume that waits on
// a state-file commit has waited.
func (s *State) Waiting() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.waiting))
	for n, t := range s.waiting {
		out[n] = t
	}
	return out
}

// SettleAll retries every unrecorded outcome whose volume has no
// operation running (a running one settles first itself). It returns the
// first error.
func (s *State) SettleAll() error {
	var first error
	for _, name := range s.Unrecorded() {
		l := s.lockOf(name)
		if !l.TryLock() {
			continue
		}
		err := s.settle(name)
		l.Unlock()
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// settle durably records the volume's current record and drops the
// intents whose outcome it carries. The caller holds the volume's lock.
func (s *State) settle(name string) error {
	s.mu.Lock()
	u := s.unrecorded[name]
	if u == nil {
		s.mu.Unlock()
		return nil
	}
	ids := append([]uint64(nil), u.intents...)
	failures := u.failures
	var rec *store.Volume
	if v := s.vols[name]; v != nil {
		rec = cloneVolume(v)
	}
	s.mu.Unlock()
	if err := s.store.Settle(ids, name, rec); err != nil {
		return fmt.Errorf("record the state of %s: %w", name, err)
	}
	s.mu.Lock()
	// A commit that failed meanwhile (a record that was not settled here)
	// stays for the next try.
	u.intents = slices.DeleteFunc(u.intents, func(id uint64) bool { return slices.Contains(ids, id) })
	if len(u.intents) == 0 && u.failures == failures {
		delete(s.unrecorded, name)
	}
	_, still := s.unrecorded[name]
	s.mu.Unlock()
	if !still && s.recorded != nil {
		s.recorded(name, nil)
	}
	return nil
}

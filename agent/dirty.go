// Which volumes the next pass must plan again.

package agent

import "sync"

// dirtySet names the volumes whose next step may have changed since the
// last pass (a manifest, a record, an operation's end, a backoff's) or
// that may start now what they could not before; or says that every
// volume must be planned (the first pass, the resync). Anything may mark;
// only the reconcile loop takes.
type dirtySet struct {
	mu    sync.Mutex
	all   bool
	names map[string]struct{}
}

// newDirtySet starts with everything marked: the first pass plans all.
func newDirtySet() *dirtySet { return &dirtySet{all: true, names: map[string]struct{}{}} }

func (s *dirtySet) mark(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.all {
		s.names[name] = struct{}{}
	}
}

func (s *dirtySet) markAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = true
	clear(s.names)
}

// take returns what was marked and forgets it: all, or the names.
func (s *dirtySet) take() (all bool, names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all = s.all
	if !all {
		names = make([]string, 0, len(s.names))
		for n := range s.names {
			names = append(names, n)
		}
	}
	s.all = false
	clear(s.names)
	return all, names
}

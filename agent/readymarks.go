// The ready marks: one empty file per usable volume, which volumed-wait@.service tests without a process.

package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/volumed/volumed/agent/api"
)

// readyMarks keeps, in dir, an empty file named after each volume that
// a service may use (api.Usable of its phase, the rule of volumed wait).
// volumed-wait@NAME.service skips its `volumed wait` when NAME's file is
// there (ConditionPathExists=): systemd tests the path itself, so a wait
// for a volume that is already Ready starts no process (what one cost a
// boot is in docs/performance.md, "Boot cost").
//
// A mark is never stale: every start removes them all before anything
// else (a killed agent's included), the operation that would make its
// volume unusable removes it before it acts and does not run if it
// cannot (hold), and each pass sets or removes the marks of the
// volumes it planned from the phase the status shows (sync). A clean
// stop removes them all, as systemd does with the unit's
// RuntimeDirectory= whenever the agent stops, crashed or not.
type readyMarks struct {
	dir string // "": no marks kept

	mu     sync.Mutex
	marked map[string]bool
	// held counts, by volume, the operations running that took its mark
	// away: a sync made from a phase read before one started must not
	// put the mark back under it.
	held map[string]int
}

func newReadyMarks(dir string) *readyMarks {
	return &readyMarks{dir: dir, marked: map[string]bool{}, held: map[string]int{}}
}

// reset removes every mark, creating dir if it is missing: at a start
// (what a killed agent left) and at a stop.
func (m *readyMarks) reset() error {
	if m.dir == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return fmt.Errorf("ready marks: %w", err)
	}
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		return fmt.Errorf("ready marks: %w", err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(m.dir, e.Name())); err != nil {
			return fmt.Errorf("ready marks: %w", err)
		}
	}
	m.marked = map[string]bool{}
	return nil
}

// hold removes name's mark, whatever this agent believes of it, and
// keeps it away until release is called: an operation that may take the
// volume away runs only once this worked.
func (m *readyMarks) hold(name string) (release func(), err error) {
	if m.dir == "" {
		return func() {}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.removeLocked(name); err != nil {
		return nil, err
	}
	m.held[name]++
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.held[name]--; m.held[name] <= 0 {
			delete(m.held, name)
		}
	}, nil
}

func (m *readyMarks) removeLocked(name string) error {
	if err := os.Remove(filepath.Join(m.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the ready mark of %s: %w", name, err)
	}
	delete(m.marked, name)
	return nil
}

// sync sets the mark of each volume named in usable to its value, and
// with all removes every other; only a mark to change costs a system
// call. A mark that cannot be made leaves the wait to `volumed wait`;
// one that cannot be removed is an error (tried again at the next sync).
func (m *readyMarks) sync(usable map[string]bool, all bool) error {
	if m.dir == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if all {
		for name := range m.marked {
			if _, ok := usable[name]; !ok {
				errs = append(errs, m.removeLocked(name))
			}
		}
	}
	for name, ok := range usable {
		switch {
		case ok && !m.marked[name] && m.held[name] == 0:
			if err := os.WriteFile(filepath.Join(m.dir, name), nil, 0o644); err != nil {
				errs = append(errs, fmt.Errorf("make the ready mark of %s: %w", name, err))
				continue
			}
			m.marked[name] = true
		case !ok && m.marked[name]:
			errs = append(errs, m.removeLocked(name))
		}
	}
	return errors.Join(errs...)
}

// syncReadyMarks marks the volumes the pass planned by their phase, the
// one rule the status and the STATUS= line use; before READY=1, which
// the pass may send.
func (a *Agent) syncReadyMarks(p passPlan, desired map[string]*Desired) {
	if a.ready.dir == "" {
		return
	}
	usable := make(map[string]bool, len(p.planned))
	for _, n := range p.planned {
		usable[n] = api.Usable(volumePhase(a.phaseFactsOf(n, desired[n], a.view.actual[n], a.view.planner.Next)))
	}
	if err := a.ready.sync(usable, p.all); err != nil {
		a.cfg.Log.Error("ready marks", "error", err)
	}
}

// withoutReadyMark runs fn, an operation of volume, with the volume's
// mark removed first unless the operation leaves it usable (its phase
// while it runs): fn does not run if the mark stays.
func (a *Agent) withoutReadyMark(ctx context.Context, volume, op string, fn func(context.Context) error) error {
	if api.Usable(opPhase[op]) {
		return fn(ctx)
	}
	release, err := a.ready.hold(volume)
	if err != nil {
		return err
	}
	defer release()
	return fn(ctx)
}

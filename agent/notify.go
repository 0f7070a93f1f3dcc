// What systemd is told: READY=1, STATUS= and the usage cache refreshed when things settle.

package agent

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

const statusEvery = 250 * time.Millisecond

// systemdStatus is what systemd was told and when: whether the agent has
// settled (READY=1 once), and the last STATUS= line.
type systemdStatus struct {
	mu      sync.Mutex
	settled bool
	// ever: the agent has settled once (READY=1 was sent).
	ever       bool
	line       string
	lastReport time.Time
}

// passDone notes how a pass left things: first says the agent has just
// settled, report that the STATUS= line is due. The line costs a status
// of every volume: while operations run, it is refreshed at most every
// statusEvery, and always once things settle.
func (s *systemdStatus) passDone(settled bool, now time.Time) (first, report bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first = settled && !s.settled
	s.settled = settled
	s.ever = s.ever || settled
	report = settled || now.Sub(s.lastReport) >= statusEvery
	if report {
		s.lastReport = now
	}
	return first, report
}

// settledForReady is whether a pass counts as settled. Until the agent
// has settled once (READY=1, which every service of the boot waits for:
// the unit is before sysinit.target) only local volumes count: a network
// volume's first attempt may run into the login timeouts of a network
// that is not up yet (35 s of iscsiadm at boot under test/os), and network
// volumes come up when the network does; a service that needs one waits
// for it with volumed-wait@. Later, every operation counts.
func settledForReady(converged, ever bool, running []string, network func(volume string) bool) bool {
	if converged || ever {
		return converged
	}
	for _, v := range running {
		if !network(v) {
			return false
		}
	}
	return true
}

func (s *systemdStatus) hasSettled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ever
}

func (s *systemdStatus) isSettled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settled
}

// setLine keeps line and reports whether it differs from the last.
func (s *systemdStatus) setLine(line string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := line != s.line
	s.line = line
	return changed
}

func (a *Agent) notify(state string) {
	if a.cfg.Notify != nil {
		a.cfg.Notify(state)
	}
}

// reportStatus tells systemd how things stand, READY=1 the first time the
// agent has settled (everything converged or waiting out a backoff).
// It runs at the end of a pass, on the reconcile loop: the pass's own
// desired state, records and plan give each volume's phase, without a
// copy of every record and a plan of every volume again, and only the
// phase is told (volumePhase), not each volume's whole status: that was
// most of what one edit among a thousand cost (docs/performance.md).
func (a *Agent) reportStatus(firstSettle bool, desired map[string]*Desired) {
	counts := map[string]int{}
	for _, n := range a.statusNames(desired, a.view.actual) {
		counts[volumePhase(a.phaseFactsOf(n, desired[n], a.view.actual[n], a.view.planner.Next))]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], strings.ToLower(k)))
	}
	line := "no volumes"
	if len(parts) > 0 {
		line = strings.Join(parts, ", ")
	}
	changed := a.systemd.setLine(line)
	if firstSettle {
		a.cfg.Log.Info("converged", "status", line)
		a.notify("READY=1\nSTATUS=" + line)
		return
	}
	if changed {
		a.notify("STATUS=" + line)
	}
}

func (a *Agent) refreshUsage() {
	paths := map[string]string{}
	for name, rec := range a.state.Snapshot() {
		if rec.Staging != nil {
			paths[name] = rec.Staging.Path
		}
	}
	a.usage.refresh(paths)
}

// refreshUsageOf measures again the volumes named (those a change touched).
func (a *Agent) refreshUsageOf(names []string) {
	paths := map[string]string{}
	for _, name := range names {
		if rec := a.state.Get(name); rec != nil && rec.Staging != nil {
			paths[name] = rec.Staging.Path
		}
	}
	a.usage.refreshSome(names, paths)
}

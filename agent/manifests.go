// The desired state: the manifests as last read, and their problems.

package agent

import (
	"slices"
	"sync"

	"github.com/volumed/volumed/agent/manifest"
)

// desiredState is what the manifests want, replaced whole at each read.
type desiredState struct {
	mu       sync.Mutex
	volumes  map[string]*Desired
	problems []string
}

// replace installs a new read and returns the one it replaces.
func (s *desiredState) replace(volumes map[string]*Desired, problems []string) (map[string]*Desired, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, oldProblems := s.volumes, s.problems
	s.volumes, s.problems = volumes, problems
	return old, oldProblems
}

// current is the desired state of the last read (not to be changed).
func (s *desiredState) current() map[string]*Desired {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.volumes
}

func (s *desiredState) problemList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.problems...)
}

// loadManifests re-reads the manifests and replaces the desired state.
func (a *Agent) loadManifests() {
	a.applyManifests(a.cfg.Manifests.Load())
}

// loadChangedManifests reads again the manifests at paths, those the
// watch named since the last read: one edit among a thousand files costs
// that file, not the thousand (docs/performance.md).
func (a *Agent) loadChangedManifests(paths []string) {
	if l, ok := a.cfg.Manifests.(changedLoader); ok {
		a.applyManifests(l.LoadChanged(paths))
		return
	}
	a.loadManifests()
}

// applyManifests replaces the desired state with what a read found.
// A volume whose manifest changed gets a fresh backoff.
func (a *Agent) applyManifests(res *manifest.Result) {
	desired := buildDesired(res, a.manifests.current())
	problems := make([]string, 0, len(res.Problems))
	for _, p := range res.Problems {
		problems = append(problems, p.Error())
	}
	old, oldProblems := a.manifests.replace(desired, problems)

	for name, d := range desired {
		if o := old[name]; o == nil || o.Generation != d.Generation {
			a.exec.Reset(name)
			a.dirty.mark(name)
			a.askGrowthCheckOfVolume(name)
			if o != nil {
				a.cfg.Log.Info("manifest changed", "volume", name, "file", d.File)
			}
		}
	}
	for name := range old {
		if desired[name] == nil {
			a.exec.Reset(name)
			a.dirty.mark(name)
			a.cfg.Log.Info("manifest removed", "volume", name)
		}
	}
	if !slices.Equal(oldProblems, problems) {
		for _, p := range problems {
			a.cfg.Log.Error("manifest refused", "problem", p)
		}
	}
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.manifestErrors.Set(float64(len(res.BadFiles)))
	}
	a.Trigger()
}

// desiredSnapshot is the desired state as the passes see it: the
// manifests and the external entries (CSI), with the network hold applied.
func (a *Agent) desiredSnapshot() map[string]*Desired {
	return a.hold.apply(a.manifests.merged(a.external))
}

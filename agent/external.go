// Desired state from a source other than the manifests: the CSI node
// service, whose kubelet calls add and remove one volume at a time.

package agent

import (
	"maps"
	"sort"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// externalState holds the volumes another source wants. Its entries are
// handed in whole and never changed in place.
type externalState struct {
	volumes map[string]*Desired
}

// SetDesired makes d (Name, Kind, Spec, Caps, Targets, StagingPath set
// by the caller) part of the desired state, replacing any entry of the
// same name that was set this way; Generation is computed here. Its name
// starts with manifest.ReservedPrefix, which no manifest may use. Safe to
// call before Run, which is how entries that were persisted are handed
// back at start.
func (a *Agent) SetDesired(d *Desired) {
	d.Generation = Generation(d)
	a.manifests.mu.Lock()
	old := a.external.volumes[d.Name]
	next := maps.Clone(a.external.volumes)
	if next == nil {
		next = map[string]*Desired{}
	}
	next[d.Name] = d
	a.external.volumes = next
	a.manifests.mu.Unlock()
	if old == nil || old.Generation != d.Generation {
		a.exec.Reset(d.Name)
		a.dirty.mark(d.Name)
		a.askGrowthCheckOfVolume(d.Name)
	}
	a.Trigger()
}

// RemoveDesired drops an entry SetDesired made: the volume is torn down.
func (a *Agent) RemoveDesired(name string) {
	a.manifests.mu.Lock()
	_, ok := a.external.volumes[name]
	if ok {
		next := maps.Clone(a.external.volumes)
		delete(next, name)
		a.external.volumes = next
	}
	a.manifests.mu.Unlock()
	if ok {
		a.exec.Reset(name)
		a.dirty.mark(name)
		a.Trigger()
	}
}

// merged is the manifests' volumes with the external ones added (their
// names never meet: manifest.ReservedPrefix).
func (s *desiredState) merged(ext *externalState) map[string]*Desired {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ext.volumes) == 0 {
		return s.volumes
	}
	out := make(map[string]*Desired, len(s.volumes)+len(ext.volumes))
	maps.Copy(out, ext.volumes)
	maps.Copy(out, s.volumes)
	return out
}

// VolumeView is what a caller waiting on one volume needs: its record,
// the latest failure of its operations and its conditions.
type VolumeView struct {
	Record     *store.Volume // nil before the first operation
	Running    string        // the operation running now, if any
	Failure    *Failure
	Conditions []api.Condition
}

// View returns the volume's state now; ok is false until the agent has
// reconstructed its actual state.
func (a *Agent) View(name string) (VolumeView, bool) {
	if !a.started() {
		return VolumeView{}, false
	}
	v := VolumeView{Record: a.state.Get(name), Conditions: a.conds.Of(name)}
	v.Running, _ = a.exec.Running(name)
	if f, ok := a.exec.LastFailure(name); ok {
		v.Failure = &f
	}
	sort.Slice(v.Conditions, func(i, j int) bool { return v.Conditions[i].Type < v.Conditions[j].Type })
	return v, true
}

// Settled reports whether the agent has reconstructed its state and
// converged once (when systemd is told READY=1): the readiness a CSI
// Probe reports. It does not drop while later operations run: the
// plugin stays able to take calls.
func (a *Agent) Settled() bool {
	return a.started() && a.systemd.hasSettled()
}

// ClaimHolder names the wanted volume other than skip that already
// claims one of claims (of a source of driver), or "".
func (a *Agent) ClaimHolder(kind string, claims []manifest.Claim, skip string) string {
	for name, d := range a.manifests.merged(a.external) {
		if name == skip || d.Kind != kind || !d.Wanted() {
			continue
		}
		for _, c := range d.Caps.Claims {
			for _, w := range claims {
				if c.Key == w.Key {
					return name
				}
			}
		}
	}
	return ""
}

// CheckGrowth asks the next pass to compare the volumes' sizes with
// their filesystems (a CSI NodeExpandVolume: the device grew on the
// target's side).
func (a *Agent) CheckGrowth() {
	a.askGrowthCheck()
	a.Trigger()
}

package agent

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/internal/readonce"
	"github.com/volumed/volumed/store"
)

// growthRequests are the growth checks asked of the next pass: of every
// volume, of the volumes on some devices, or of some volumes. Passes in
// between skip the size reads.
type growthRequests struct {
	mu      sync.Mutex
	all     bool
	devices map[string]bool
	volumes map[string]bool
}

// ask asks for the volume on device (its kernel name), or every volume
// when device is "": a device event costs one volume's check.
func (g *growthRequests) ask(device string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if device == "" {
		g.all = true
		return
	}
	if g.devices == nil {
		g.devices = map[string]bool{}
	}
	g.devices[device] = true
}

// askVolume asks for one volume's check: its manifest changed.
func (g *growthRequests) askVolume(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.volumes == nil {
		g.volumes = map[string]bool{}
	}
	g.volumes[name] = true
}

// take returns what was asked and forgets it.
func (g *growthRequests) take() (all bool, devices, volumes map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	all, devices, volumes = g.all, g.devices, g.volumes
	g.all, g.devices, g.volumes = false, nil, nil
	return all, devices, volumes
}

func (a *Agent) askGrowthCheck() { a.growth.ask("") }

func (a *Agent) askGrowthCheckOf(device string) { a.growth.ask(device) }

func (a *Agent) askGrowthCheckOfVolume(name string) { a.growth.askVolume(name) }

// observe gathers what a pass decides on besides the records: which
// volumes are busy, and the sizes of those whose growth check was asked
// for (a stat and a sysfs read each, and a source's report: lvm2's).
// The checks share one look at the host and are awaited as a step that
// runs programs. It decides nothing.
func (a *Agent) observe(ctx context.Context, desired map[string]*Desired, actual map[string]*store.Volume) decide.Observations {
	obs := decide.Observations{Running: map[string]bool{}, BackingChanged: map[string]bool{}}
	all, devices, volumes := a.growth.take()
	if !all && len(devices) == 0 && len(volumes) == 0 {
		return obs
	}
	a.await(ctx, func(ctx context.Context) {
		a.checkGrowth(readonce.Open(ctx), &obs, desired, actual, all, devices, volumes)
	})
	return obs
}

// checkGrowth reads the sizes of the volumes asked (observe).
func (a *Agent) checkGrowth(ctx context.Context, obs *decide.Observations, desired map[string]*Desired, actual map[string]*store.Volume,
	all bool, devices, volumes map[string]bool) {
	obs.Sizes = map[string]decide.Sizes{}
	asked := desired
	if !all && len(devices) == 0 {
		// A manifest edit costs the volumes edited, not a walk of all.
		asked = make(map[string]*Desired, len(volumes))
		for n := range volumes {
			if d := desired[n]; d != nil {
				asked[n] = d
			}
		}
	}
	for n, d := range asked {
		rec := actual[n]
		if _, running := a.exec.Running(n); running {
			obs.Running[n] = true
			continue
		}
		if a.conds.Has(n, CondBackingChanged) {
			obs.BackingChanged[n] = true
			continue
		}
		onDevice := rec != nil && rec.Attachment != nil && devices[filepath.Base(rec.Attachment.Device)]
		if !all && !volumes[n] && !onDevice {
			continue
		}
		s, err := a.observeSizes(ctx, d, rec)
		if err != nil {
			a.driftLog.failed("size "+n, "growth check: cannot read a size; the volume is not grown until it can", err, "volume", n)
		} else {
			a.driftLog.ok("size "+n, "growth check: size readable again", "volume", n)
		}
		obs.Sizes[n] = s
	}
}

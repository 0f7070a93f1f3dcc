package agent

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// growthRequests are the growth checks asked of the next pass: of every
// volume, or of the volumes on some devices. Passes in between skip the
// size reads.
type growthRequests struct {
	mu      sync.Mutex
	all     bool
	devices map[string]bool
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

// take returns what was asked and forgets it.
func (g *growthRequests) take() (all bool, devices map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	all, devices = g.all, g.devices
	g.all, g.devices = false, nil
	return all, devices
}

func (a *Agent) askGrowthCheck() { a.growth.ask("") }

func (a *Agent) askGrowthCheckOf(device string) { a.growth.ask(device) }

// observe gathers what a pass decides on besides the records: which
// volumes are busy, and the sizes of those whose growth check was asked
// for (a stat and a sysfs read each). It decides nothing.
func (a *Agent) observe(ctx context.Context, desired map[string]*Desired, actual map[string]*store.Volume) decide.Observations {
	obs := decide.Observations{Running: map[string]bool{}, BackingChanged: map[string]bool{}}
	all, devices := a.growth.take()
	if !all && len(devices) == 0 {
		return obs
	}
	obs.Sizes = map[string]decide.Sizes{}
	for n, d := range desired {
		rec := actual[n]
		if _, running := a.exec.Running(n); running {
			obs.Running[n] = true
			continue
		}
		if a.conds.Has(n, CondBackingChanged) {
			obs.BackingChanged[n] = true
			continue
		}
		if !all && (rec == nil || rec.Attachment == nil || !devices[filepath.Base(rec.Attachment.Device)]) {
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
	return obs
}

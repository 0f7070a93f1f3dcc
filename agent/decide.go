// A pass's life: observe (observe.go), decide (here, pure), act (loop.go).

package agent

import (
	"sort"

	"github.com/volumed/volumed/store"
)

// Observations are what a pass read of the world besides the records,
// before deciding anything: reading decides nothing, and deciding reads
// nothing.
type Observations struct {
	// Running and BackingChanged are noted of the volumes a growth check
	// was asked for. Running: an operation is in flight. BackingChanged:
	// the image file is no longer the one the device reads, so growing
	// it would grow the wrong file.
	Running        map[string]bool
	BackingChanged map[string]bool
	// Sizes: the volumes whose growth was checked this pass (a check is
	// asked for at resync, on device events and on manifest changes).
	Sizes map[string]sizes
}

// Decision is everything one pass does.
type Decision struct {
	// Ops are the operations, in the order to start them.
	Ops []Op
	// GrowSettled: volumes checked and found needing no growth; a
	// failure of an earlier grow no longer matters.
	GrowSettled []string
}

// Decide is the whole of a pass's decision, from desired and actual
// state and what was observed: Plan's next step of every volume, then a
// grow of each converged volume whose sizes say so. Like Plan it is
// pure. Three decisions are left to their operations because each rests
// on what was read right before acting, under the volume's intent:
// format-or-not (decideMkfs and decideResume over the probe, in
// opMountDevice), encrypt-or-not (decideEncrypt over the probe and the
// LUKS2 header, in opOpen) and release-or-not of a shared kernel object
// (mayRelease, in opDetach).
func Decide(desired map[string]*Desired, actual map[string]*store.Volume, obs Observations) Decision {
	dec := Decision{Ops: Plan(desired, actual)}
	if len(obs.Sizes) == 0 {
		return dec
	}
	planned := map[string]bool{}
	for _, op := range dec.Ops {
		planned[op.Volume] = true
	}
	names := make([]string, 0, len(obs.Sizes))
	for n := range obs.Sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := desired[n]
		if d == nil || planned[n] || obs.Running[n] || obs.BackingChanged[n] {
			continue
		}
		if growNeeded(d, actual[n], obs.Sizes[n]) {
			dec.Ops = append(dec.Ops, Op{Volume: n, Kind: OpGrow})
		} else {
			dec.GrowSettled = append(dec.GrowSettled, n)
		}
	}
	return dec
}

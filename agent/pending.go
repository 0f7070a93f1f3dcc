// The PendingChange condition: the manifest changes a pass found not in
// effect (decide.PendingChanges), said on each volume.

package agent

import (
	"strings"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// updatePending raises or clears each volume's PendingChange condition
// as the pass's decision says (decide.Decision.Pending).
func (a *Agent) updatePending(desired map[string]*Desired, actual map[string]*store.Volume, pending map[string][]decide.Pending) {
	for name := range actual {
		if desired[name] == nil {
			a.conds.Clear(name, CondPendingChange) // being torn down: nothing is pending
		}
	}
	for name := range desired {
		p := pending[name]
		if len(p) == 0 {
			a.conds.Clear(name, CondPendingChange)
			continue
		}
		msgs := make([]string, len(p))
		for i, c := range p {
			msgs[i] = c.Message
		}
		a.conds.Set(name, CondPendingChange, p[0].Reason, strings.Join(msgs, "; "))
	}
}

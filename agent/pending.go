// The PendingChange condition: the manifest changes a pass found not in
// effect (decide.PendingChanges), said on each volume.

package agent

import (
	"strings"

	"github.com/volumed/volumed/agent/decide"
)

// updatePending raises or clears the PendingChange condition of each
// volume planned as the pass's decision says (decide.Decision.Pending):
// what is pending changes only with what marks a volume to be planned.
func (a *Agent) updatePending(desired map[string]*Desired, names []string, pending map[string][]decide.Pending) {
	for _, name := range names {
		if desired[name] == nil {
			a.conds.Clear(name, CondPendingChange) // being torn down, or gone: nothing is pending
			continue
		}
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

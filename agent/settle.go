// Outcomes the state file could not take are kept and retried until durable.

package agent

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// abandonWait bounds the wait for cancelled operations at shutdown.
const abandonWait = 3 * time.Second

// stuckOn names the volumes whose operations wait on the state file.
func (a *Agent) stuckOn() []string {
	var out []string
	for n := range a.state.Waiting() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// settleLoop retries, until they are durable, the outcomes whose commit
// failed (a full or failing state filesystem). It ends with ctx.
// An agent whose state file works costs nothing here: it waits for the
// first failure, and ticks only while something is unrecorded.
func (a *Agent) settleLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.state.Failed():
		}
		for len(a.state.Unrecorded()) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(settleEvery):
			}
			a.settleOnce()
		}
	}
}

func (a *Agent) settleOnce() {
	if err := a.state.SettleAll(); err != nil {
		a.cfg.Log.Debug("state file still not writable", "error", err)
	}
}

const settleEvery = time.Second

// noteRecorded is the state's hook: a volume whose outcome is only in
// memory says so until it is on disk.
func (a *Agent) noteRecorded(name string, err error) {
	if err == nil {
		if a.conds.Clear(name, CondStateNotRecorded) {
			a.cfg.Log.Info("state recorded again", "volume", name)
			a.dirty.mark(name)
			a.Trigger()
		}
		return
	}
	a.cfg.Log.Error("state file write failed; the outcome is kept in memory and retried", "volume", name, "error", err)
	a.conds.Set(name, CondStateNotRecorded, "StateFileWriteFailed", fmt.Sprintf(
		"%v: the state file does not know this volume's latest state yet; volumed keeps it in memory, retries every %s, and starts no new operation on the volume until it is recorded. Free space on (or repair) the state filesystem",
		err, settleEvery))
}

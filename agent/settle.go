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
// failed (a full or failing state filesystem), after the backoff an
// operation that fails gets (backoffFor: 500 ms doubling to about 2 min):
// a state disk that keeps failing is tried less and less often, not
// every second for as long as it fails. An intent committed meanwhile
// (the disk took a write) ends the wait, so a disk that heals is seen at
// once. It ends with ctx. An agent whose state file works costs nothing
// here: it waits for the first failure.
func (a *Agent) settleLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.state.Failed():
		}
		select {
		case <-a.state.Committed(): // a commit from before the failure
		default:
		}
		for tries := 1; len(a.state.Unrecorded()) > 0; tries++ {
			select {
			case <-ctx.Done():
				return
			case <-a.state.Committed():
			case <-a.settleAfter(backoffFor(tries)):
			}
			if a.settleOnce() {
				tries = 0
			}
		}
	}
}

// settleOnce retries every unrecorded outcome; it reports whether all
// those it could try were recorded.
func (a *Agent) settleOnce() bool {
	if err := a.state.SettleAll(); err != nil {
		a.cfg.Log.Debug("state file still not writable", "error", err)
		return false
	}
	return true
}

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
		"%v: the state file does not know this volume's latest state yet; volumed keeps it in memory, retries after a backoff (%s doubling to %s, at once when the state file takes a write again), and starts no new operation on the volume until it is recorded. Free space on (or repair) the state filesystem",
		err, initialBackoff, maxBackoff.Round(time.Minute)))
}

package agent

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/volumed/volumed/agent/api"
)

// Condition types: each names something wrong with a volume. A volume
// with any of them is not Ready (it is Degraded when it is otherwise in
// place), so Ready is a promise that nothing is known to be wrong.
const (
	// CondStateNotRecorded: an operation's outcome could not be made
	// durable in the state file; it is kept in memory and retried.
	CondStateNotRecorded = "StateNotRecorded"
	// CondMountConfig: the filesystem did not mount because of the
	// manifest (options, permissions, a path): not damage.
	CondMountConfig = "MountConfig"
	// CondFormatRefused: the device is not blank in a way volumed will
	// not format over, or a format failed half-way.
	CondFormatRefused = "FormatRefused"
	// CondNotBlank: the device carries no signature but is not blank
	// by the blank rule (unknown data, partitions or holders only the
	// kernel knows): it is never formatted or encrypted.
	CondNotBlank = "NotBlank"
	// CondInUse: a local device the volume names is used outside
	// volumed (mounted, held, open exclusively): it is not attached.
	CondInUse = "InUse"
	// CondBackingChanged: a loop image was deleted or replaced under its
	// live device.
	CondBackingChanged = "BackingChanged"
	// CondBackingFull: the filesystem holding a loop image is out of space.
	CondBackingFull = "BackingFull"
	// CondFilesystemError: the volume's filesystem reports errors, was
	// shut down or remounted read-only by the kernel.
	CondFilesystemError = "FilesystemError"
	// CondPendingChange: a manifest change that cannot be applied while
	// the volume is mounted.
	CondPendingChange = "PendingChange"
	// CondGrowFailed: an online grow failed.
	CondGrowFailed = "GrowFailed"
	// CondTeardownBlocked: an unmount or detach is refused as busy.
	CondTeardownBlocked = "TeardownBlocked"
	// CondWaitingForState: an operation waits on a state-file commit.
	CondWaitingForState = "WaitingForState"
	// CondLocked: an encrypted volume that none of its keys opens.
	CondLocked = "Locked"
	// CondIdentityChanged: the device holds another filesystem or LUKS2
	// header than the one the volume was formatted with or adopted.
	CondIdentityChanged = "IdentityChanged"
	// CondSourceDegraded: what the device stands on puts its data at
	// risk (an LV's thin pool nearly full, its VG missing a disk).
	CondSourceDegraded = "SourceDegraded"
	// CondActivationFailed: the volume's source is there but would not
	// activate (an LV lvm2 refuses to activate); the attach is retried.
	CondActivationFailed = "ActivationFailed"
)

// AllConditionTypes lists every type, for the metric (a series per type
// and volume, 0 or 1, so alerts see a condition clear).
var AllConditionTypes = []string{
	CondStateNotRecorded, CondMountConfig, CondFormatRefused, CondNotBlank, CondInUse, CondBackingChanged, CondBackingFull,
	CondFilesystemError, CondPendingChange, CondGrowFailed, CondTeardownBlocked, CondWaitingForState, CondLocked,
	CondIdentityChanged, CondSourceDegraded, CondActivationFailed,
}

// conditions holds the conditions of every volume, set by whoever
// detects them (operations, the drift check, the store retry) and read
// by the status. It has a lock of its own: detectors run on many
// goroutines and never need the agent's.
type conditions struct {
	now func() time.Time

	mu  sync.Mutex
	set map[string]map[string]api.Condition // volume -> type -> condition
}

func newConditions(now func() time.Time) *conditions {
	return &conditions{now: now, set: map[string]map[string]api.Condition{}}
}

// Set raises (or updates) a condition. Since stays when the reason is
// unchanged, so it says how long the problem has lasted.
func (c *conditions) Set(volume, typ, reason, message string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.set[volume]
	if m == nil {
		m = map[string]api.Condition{}
		c.set[volume] = m
	}
	since := c.now()
	if old, ok := m[typ]; ok && old.Reason == reason {
		since = old.Since
	}
	m[typ] = api.Condition{Type: typ, Reason: reason, Message: message, Since: since}
}

// Clear drops a condition; it reports whether there was one.
func (c *conditions) Clear(volume, typ string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.set[volume]
	if _, ok := m[typ]; !ok {
		return false
	}
	delete(m, typ)
	if len(m) == 0 {
		delete(c.set, volume)
	}
	return true
}

// Has reports whether volume has a condition of type typ.
func (c *conditions) Has(volume, typ string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.set[volume][typ]
	return ok
}

// Any reports whether volume has a condition at all.
func (c *conditions) Any(volume string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.set[volume]) > 0
}

// Forget drops every condition of a volume that is gone.
func (c *conditions) Forget(volume string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.set, volume)
}

// Of returns a volume's conditions, oldest first (then by type).
func (c *conditions) Of(volume string) []api.Condition {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]api.Condition, 0, len(c.set[volume]))
	for _, cond := range c.set[volume] {
		out = append(out, cond)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Since.Equal(out[j].Since) {
			return out[i].Since.Before(out[j].Since)
		}
		return out[i].Type < out[j].Type
	})
	return out
}

// apply raises typ on volume when p is set and clears it when p is nil;
// a check that could not tell (err) leaves what was known.
func (a *Agent) apply(volume, typ string, p *Problem, err error) {
	switch {
	case err != nil:
		a.cfg.Log.Warn("condition check failed; keeping what was known", "volume", volume, "type", typ, "error", err)
	case p == nil:
		if a.conds.Clear(volume, typ) {
			a.cfg.Log.Info("condition cleared", "volume", volume, "type", typ)
		}
	default:
		if !a.conds.Has(volume, typ) {
			a.cfg.Log.Warn("condition raised", "volume", volume, "type", typ, "reason", p.Reason, "message", p.Message)
		}
		a.conds.Set(volume, typ, p.Reason, p.Message)
	}
}

// activationProblem is the one rule for CondActivationFailed, over an
// attach's outcome: a source that would not activate raises it, with
// what its tool said; an attach that succeeded clears it. Any other
// failure (a report that could not be read, a wait) says nothing of
// activation: known is false and the condition stays as it was.
func activationProblem(volume string, err error) (p *Problem, known bool) {
	if err == nil {
		return nil, true
	}
	var na *NotActivated
	if !errors.As(err, &na) {
		return nil, false
	}
	return &Problem{Reason: na.Reason, Message: fmt.Sprintf("the source of volume %s would not activate: %v", volume, na.Err)}, true
}

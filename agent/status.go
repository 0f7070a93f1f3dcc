package agent

import (
	"fmt"
	"sort"
	"time"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

var opPhase = map[string]string{
	OpAttach:        api.PhaseAttaching,
	OpOpen:          api.PhaseAttaching,
	OpEncrypt:       api.PhaseFormatting,
	OpClose:         api.PhaseDetaching,
	OpFormat:        api.PhaseFormatting,
	OpMountDevice:   api.PhaseMounting,
	OpPublish:       api.PhaseMounting,
	OpUnpublish:     api.PhaseUnmounting,
	OpUnmountDevice: api.PhaseUnmounting,
	OpDetach:        api.PhaseDetaching,
	OpGrow:          api.PhaseMounting,
	OpRemount:       api.PhaseMounting,
	// A recovery key goes into the header of a volume in use.
	OpRecoveryKey: api.PhaseReady,
}

// Status is the agent's view of every volume it wants or still holds.
// It reads only memory: never a mount, never the kernel.
func (a *Agent) Status() []api.Volume {
	if !a.started() {
		return nil
	}
	desired := a.desiredSnapshot()
	actual := a.state.Snapshot()
	next := map[string]Op{}
	for _, op := range decide.Plan(desired, actual) {
		next[op.Volume] = op
	}
	return a.statusOf(desired, actual, func(n string) (Op, bool) { op, ok := next[n]; return op, ok })
}

// statusOf is Status over the desired and actual state given, each
// volume's next step told by next: the API plans afresh, the reconcile
// loop asks its planner (reportStatus), which has every volume's step
// of its last pass at hand.
func (a *Agent) statusOf(desired map[string]*Desired, actual map[string]*store.Volume, next func(string) (Op, bool)) []api.Volume {
	names := a.statusNames(desired, actual)
	sort.Strings(names)
	out := make([]api.Volume, 0, len(names))
	waiting := a.state.Waiting()
	for _, n := range names {
		v := a.volumeStatus(n, desired[n], actual[n], next)
		if since, ok := waiting[n]; ok {
			v.Conditions = append(v.Conditions, waitingCondition(since, a.cfg.Now()))
		}
		out = append(out, v)
	}
	return out
}

// statusNames are the volumes a status shows, in no order: those wanted,
// those held, and those gone from both whose last outcome the state file
// has not taken (still what the state file says they are: each shown,
// with its StateNotRecorded, until that is recorded).
func (a *Agent) statusNames(desired map[string]*Desired, actual map[string]*store.Volume) []string {
	names := make([]string, 0, len(desired)+len(actual))
	for n := range desired {
		names = append(names, n)
	}
	for n := range actual {
		if desired[n] == nil {
			names = append(names, n)
		}
	}
	for _, n := range a.state.Unrecorded() {
		if desired[n] == nil && actual[n] == nil {
			names = append(names, n)
		}
	}
	return names
}

// phaseFacts is what a volume's phase is told from.
type phaseFacts struct {
	running   string // the operation running, when busy
	busy      bool
	next      Op // the step planned, when pending
	pending   bool
	wanted    bool
	pinned    bool
	unmounted string // the first target wanted that is not mounted
	failure   Failure
	failed    bool
	degraded  bool // a condition says what is wrong
}

func (a *Agent) phaseFactsOf(name string, d *Desired, rec *store.Volume, next func(string) (Op, bool)) phaseFacts {
	f := phaseFacts{wanted: d.Wanted(), pinned: rec != nil && rec.Attachment != nil && rec.Attachment.Pinned}
	f.running, f.busy = a.exec.Running(name)
	f.next, f.pending = next(name)
	f.failure, f.failed = a.exec.LastFailure(name)
	if d != nil {
		for _, t := range d.Targets {
			if rec == nil || !decide.HasTarget(rec, t.Path) {
				f.unmounted = t.Path
				break
			}
		}
	}
	f.degraded = a.conds.Any(name)
	return f
}

// volumePhase is the one rule for a volume's phase, for Status and for
// the STATUS= line (which needs nothing else of a volume's status).
func volumePhase(f phaseFacts) string {
	var phase string
	switch {
	case f.busy:
		phase = opPhase[f.running]
	case !f.pending && f.wanted && f.unmounted != "":
		phase = api.PhasePending
	case !f.pending && (f.wanted || f.pinned):
		phase = api.PhaseReady
	case !f.pending:
		phase = api.PhaseAbsent
	case f.failed && keyServerWait(f.failure.Err) != "":
		// Nothing is wrong with the volume: it waits for its key server,
		// and its Locked condition says which and why.
		phase = api.PhasePending
	case f.failed:
		phase = api.PhaseError
	case f.next.Name == OpAttach:
		phase = api.PhasePending
	case f.next.Name == OpMountDevice || f.next.Name == OpOpen:
		phase = api.PhaseAttached
	default:
		phase = opPhase[f.next.Name]
	}
	if phase == api.PhaseReady && f.degraded {
		return api.PhaseDegraded
	}
	return phase
}

func (a *Agent) volumeStatus(name string, d *Desired, rec *store.Volume, next func(string) (Op, bool)) api.Volume {
	v := api.Volume{Name: name, Kind: "Volume", Wanted: d.Wanted(), StagingPath: a.stagingPathOf(name, d, rec), Targets: []api.Target{}}
	if d != nil {
		v.Driver, v.File = d.Kind, d.File
		for _, t := range d.Targets {
			v.Targets = append(v.Targets, api.Target{Path: t.Path, ReadOnly: t.ReadOnly, SubPath: t.SubPath, Mounted: rec != nil && decide.HasTarget(rec, t.Path)})
		}
	}
	if rec != nil {
		if v.Driver == "" {
			v.Driver = rec.Kind
		}
		if rec.Attachment != nil {
			v.Device = rec.Attachment.Device
			v.Pinned = rec.Attachment.Pinned
		}
		for _, t := range rec.Targets {
			if _, ok := d.Target(t.Path); !ok {
				v.Targets = append(v.Targets, api.Target{Path: t.Path, ReadOnly: t.ReadOnly, SubPath: t.SubPath, Mounted: true})
			}
		}
		if rec.Staging != nil {
			if u, ok := a.usage.get(name); ok {
				v.CapacityBytes, v.UsedBytes = u.CapacityBytes, u.UsedBytes
			}
		}
	}
	f := a.phaseFactsOf(name, d, rec, next)
	if fail := f.failure; f.failed {
		v.LastError = fail.Op + ": " + fail.Err.Error()
		v.Retries = fail.Retries
		if t := fail.Until; !t.IsZero() {
			v.NextRetryAt = &t // zero: not retried until the manifest changes
		}
	}
	v.Phase = volumePhase(f)
	switch {
	case f.busy:
	case !f.pending && f.wanted:
		v.LastError, v.Retries, v.NextRetryAt = "", 0, nil
		if n := a.notes.get(name); n != "" {
			v.LastError = "note: " + n
		}
		if f.unmounted != "" {
			v.LastError = "waiting: target " + f.unmounted + " is held by another volume or waits for the target it is nested in"
		}
	case !f.pending && f.pinned:
		v.LastError = "pinned: the host booted from this volume, so it is not torn down whatever the manifests say"
	}
	v.Conditions = a.conds.Of(name)
	v.SourceDetail = a.sources.detail(name)
	v.Encryption = encryptionStatus(d, rec, v.Conditions)
	v.Events = a.history.of(name)
	return v
}

// waitingCondition says that an operation waits on the state file, and
// for how long: a full or frozen state filesystem shows here first.
func waitingCondition(since, now time.Time) api.Condition {
	secs := int(now.Sub(since).Seconds())
	return api.Condition{
		Type: CondWaitingForState, Reason: "StateFileNotAnswering", Since: since,
		Message: fmt.Sprintf("waiting for the state file (%ds): the next operation may not touch the kernel before its intent is on disk; "+
			"check the state filesystem (full, read-only or frozen?)", secs),
	}
}

// StatusReply is the full answer of the local API.
func (a *Agent) StatusReply() api.Status {
	return api.Status{
		Volumes: a.Status(), Problems: a.manifests.problemList(), StateRecovery: a.cfg.StateRecovery, Settled: a.systemd.isSettled(),
		Host: a.cfg.Host, BootVolumes: a.cfg.BootVolumes, NetworkHeld: a.hold.on(),
	}
}

// encryptionStatus says whether an encrypted volume is open, and by
// which kind of key, or locked; nil for a volume that is not encrypted.
func encryptionStatus(d *Desired, rec *store.Volume, conds []api.Condition) *api.Encryption {
	if rec != nil && rec.Mapping != nil {
		m := rec.Mapping
		return &api.Encryption{State: api.EncryptionOpen, Mapping: m.Device, UUID: m.UUID, KeyKind: m.KeyKind}
	}
	if !d.Encrypted() {
		return nil
	}
	for _, c := range conds {
		if c.Type == CondLocked {
			return &api.Encryption{State: api.EncryptionLocked}
		}
	}
	return &api.Encryption{State: api.EncryptionClosed}
}

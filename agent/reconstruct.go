package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/readonce"
	"github.com/volumed/volumed/store"
)

// reconstruct rebuilds the actual state before the first pass: the
// store's records and leftover intents, checked against the kernel,
// which wins where they disagree. Whatever is in place and right is
// adopted, so nothing that is already right is redone.
func (a *Agent) reconstruct(ctx context.Context) error {
	ctx = readonce.Open(ctx) // one look at the host, as start's
	return a.reconstructFrom(ctx, a.readKernel(ctx))
}

// reconstructFrom is reconstruct over what was read of the kernel (k).
func (a *Agent) reconstructFrom(ctx context.Context, k kernelRead) error {
	recs, intents, err := a.cfg.Store.Load()
	if err != nil {
		return err
	}
	if err := a.idents.load(); err != nil {
		return err
	}
	if k.err != nil {
		return k.err
	}
	mounts := k.mounts
	desired := a.desiredSnapshot()
	u := a.readIntents(intents, recs, desired)
	names := volumeNames(recs, desired, u.leftovers)

	a.state = a.newState()
	kv := a.newStartView(k.owned, mounts, recs)
	claimed := map[string]bool{} // identities of attachments some volume owns
	for _, name := range names {
		c := volumeClues{rec: recs[name], desired: desired[name], pending: u.pending[name],
			publishing: u.publishing[name], mapUUID: mappingUUID(name, recs[name], intents)}
		if c.desired == nil {
			c.desired = u.leftovers[name]
		}
		v := a.probeVolume(ctx, name, c, kv)
		a.adoptProbed(name, v, recs[name], intents, kv.holders, claimed)
	}
	a.detachOrphans(ctx, kv.ownedLists, claimed, mounts)
	a.logLeftovers(ctx, desired)
	a.sweepStaging(desired)
	// A restarted agent sees at once what went wrong while it was away
	// (an image deleted under its device), not a minute later.
	a.detect(ctx, mounts)
	for _, in := range intents {
		if err := a.cfg.Store.DropIntent(in.ID); err != nil {
			a.cfg.Log.Warn("cannot drop resolved intent yet; retrying", "volume", in.Volume, "intent", in.ID, "error", err)
			a.state.KeepIntent(in.Volume, in.ID, fmt.Errorf("drop resolved intent %d: %w", in.ID, err))
		}
	}
	return nil
}

// newState is an empty actual state wired to the agent: a record that
// changes marks its volume for the next pass.
func (a *Agent) newState() *State {
	st := NewState(a.cfg.Store, a.cfg.Now, nil)
	st.OnRecorded(a.noteRecorded)
	st.OnCommitWait(a.exec.Yield)
	st.OnChange(a.dirty.mark)
	return st
}

// uncertain is what the intents a crash left say: the operations it
// caught, per volume, and what only an intent still names.
type uncertain struct {
	pending map[string][]string
	// publishing: the targets (and their subPaths) of publishes a crash
	// caught. Nothing in the kernel names a bind mount's owner, so when
	// neither a record nor a manifest names the target any more, only
	// the intent tells that the bind there is ours to take down.
	publishing map[string]map[string]string
	// leftovers: volumes a crash caught attaching, that neither a record
	// nor a manifest names any more. Their intent says what they were
	// attaching, so it can be found and torn down.
	leftovers map[string]*Desired
}

func (a *Agent) readIntents(intents []store.Intent, recs map[string]*store.Volume, desired map[string]*Desired) uncertain {
	u := uncertain{pending: map[string][]string{}, publishing: map[string]map[string]string{}, leftovers: map[string]*Desired{}}
	for _, in := range intents {
		u.pending[in.Volume] = append(u.pending[in.Volume], in.Op)
		if in.Op == OpPublish && in.Inputs["target"] != "" {
			if u.publishing[in.Volume] == nil {
				u.publishing[in.Volume] = map[string]string{}
			}
			u.publishing[in.Volume][in.Inputs["target"]] = in.Inputs["subPath"]
		}
		a.cfg.Log.Info("resolving uncertain operation left by a previous run", "volume", in.Volume, "operation", in.Op, "started", in.StartedAt)
		if in.Op == OpAttach && recs[in.Volume] == nil && desired[in.Volume] == nil {
			if d := desiredFromIntent(in); d != nil {
				u.leftovers[in.Volume] = d
			}
		}
	}
	return u
}

// volumeNames lists, sorted, every volume a record, a manifest or an
// intent names.
func volumeNames(recs map[string]*store.Volume, desired, leftovers map[string]*Desired) []string {
	names := make([]string, 0, len(recs)+len(desired))
	for n := range recs {
		names = append(names, n)
	}
	for n := range desired {
		if recs[n] == nil {
			names = append(names, n)
		}
	}
	for n := range leftovers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// adoptProbed takes what the kernel showed of one volume as its actual
// state, and remembers the interrupted format or encryption that only
// an intent tells of.
func (a *Agent) adoptProbed(name string, v, rec *store.Volume, intents []store.Intent, holders map[string]string, claimed map[string]bool) {
	if v.Attachment != nil {
		claimed[v.Attachment.Identity] = true
		if holders[v.Attachment.Identity] == "" {
			// Adopted without a record: a later volume whose selector
			// picks the same disk leaves it to this one.
			holders[v.Attachment.Identity] = name
		}
		if v.Attachment.Owned {
			a.sessions.add(sessionKey(v.Attachment.Kind, v.Attachment.Session))
		}
	}
	if err := a.state.AdoptKnown(v, rec); err != nil {
		// Kept in memory and retried: a full state filesystem must not
		// keep the agent from starting.
		a.cfg.Log.Warn("cannot record reconstructed state yet; retrying", "volume", name, "error", err)
	}
	if uuid, ok := formatInterruptedIntent(intents, name); ok && v.Staging == nil {
		// A volume found mounted has a finished format.
		a.formats.interrupted.set(name, uuid)
	}
	if uuid, ok := lastIntent(intents, name, OpEncrypt); ok && uuid != "" && v.Mapping == nil {
		// A volume found open has a finished header.
		a.formats.encrypting.set(name, uuid)
	}
}

// sweepStaging removes the staging dirs of volumes neither wanted nor
// recorded, which their teardown left (opUnmountDevice). Only an empty
// dir that is no mount point goes: rmdir refuses anything else.
func (a *Agent) sweepStaging(desired map[string]*Desired) {
	dir := filepath.Join(a.cfg.StateDir, "staging")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() && desired[n] == nil && a.state.Get(n) == nil {
			_ = unix.Rmdir(filepath.Join(dir, n))
		}
	}
}

// formatInterruptedIntent returns the filesystem UUID of the volume's
// last format intent left uncertain, if any ("" for an intent of a
// version that chose none).
func formatInterruptedIntent(intents []store.Intent, name string) (string, bool) {
	return lastIntent(intents, name, OpFormat)
}

// mappingUUID is the LUKS2 UUID a volume's mapping must map to be
// adopted: the record's, else the one an open left uncertain was
// opening ("" when neither says: the header on the device decides).
func mappingUUID(name string, rec *store.Volume, intents []store.Intent) string {
	if rec != nil && rec.Mapping != nil {
		return rec.Mapping.UUID
	}
	uuid, _ := lastIntent(intents, name, OpOpen)
	return uuid
}

// lastIntent returns the "uuid" input of the volume's last intent of op
// left uncertain, if any.
func lastIntent(intents []store.Intent, name, op string) (string, bool) {
	uuid, found := "", false
	for _, in := range intents {
		if in.Volume == name && in.Op == op {
			uuid, found = in.Inputs["uuid"], true
		}
	}
	return uuid, found
}

// desiredFromIntent rebuilds, from an attach intent's inputs, enough of
// a volume to find what it attached.
func desiredFromIntent(in store.Intent) *Desired {
	var src manifest.Source
	if err := json.Unmarshal([]byte(in.Inputs["source"]), &src); err != nil || src.Kind == "" {
		return nil
	}
	return &Desired{Name: in.Volume, Kind: src.Kind, Spec: &manifest.VolumeSpec{Source: src}, Absent: true}
}

// keepOptions carries over what a record says a mount was made with
// when the kernel shows that very mount: mountinfo cannot tell it (it
// shows the filesystem's options, not the manifest's words). A remount
// left uncertain by a crash is simply done again: it is idempotent.
func keepOptions(m *store.MountRecord, rec store.MountRecord) {
	if rec.MountID == m.MountID {
		m.Options, m.Refused = rec.Options, rec.Refused
	}
}

func mountReadOnly(m *mountinfo.Info) bool { return hasOption(m.Options, "ro") }

func hasOption(opts, want string) bool {
	start := 0
	for i := 0; i <= len(opts); i++ {
		if i == len(opts) || opts[i] == ',' {
			if opts[start:i] == want {
				return true
			}
			start = i + 1
		}
	}
	return false
}

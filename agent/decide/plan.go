package decide

import (
	"sort"

	"github.com/volumed/volumed/store/record"
)

// Op is the next step for one volume.
type Op struct {
	Volume string
	Name   string
	// Target is the publish target (publish) or the recorded path (unpublish).
	Target DesiredTarget
}

// Stage orders a pass the way the kubelet reconciler does: first take
// away what is no longer wanted from consumers, then set up, then tear
// down devices.
func (o Op) Stage() int {
	switch o.Name {
	case OpUnpublish:
		return 0
	case OpUnmountDevice, OpClose, OpDetach:
		return 2
	}
	return 1
}

// Plan decides, from desired and actual state alone, the next operation
// of every volume that is not where the manifests want it. It is pure:
// the executor acts, Plan only looks. At most one operation per volume is
// returned because a volume's operations never run concurrently.
func Plan(desired map[string]*Desired, actual map[string]*record.Volume) []Op {
	// Paths that some volume holds right now: a publish onto one of them
	// waits until its holder has unpublished.
	held := newHeld()
	for name, a := range actual {
		for _, t := range a.Targets {
			held.add(t.Path, name)
		}
	}
	names := make([]string, 0, len(desired)+len(actual))
	for n := range desired {
		names = append(names, n)
	}
	for n := range actual {
		if _, ok := desired[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)

	var ops []Op
	for _, n := range names {
		if op, ok := nextOp(n, desired[n], actual[n], held); ok {
			ops = append(ops, op)
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Stage() < ops[j].Stage() })
	return ops
}

// nextOp is one volume's next step. Besides the volume's own desired
// entry and record it reads only held, at these paths (Planner.Update
// replans by this list): those under the volume's recorded targets
// (coversHeld), its desired targets' own (heldByOther), and those above
// a target nested in another volume's (enclosedBy, asking for that one).
func nextOp(name string, d *Desired, a *record.Volume, held *heldPaths) (Op, bool) {
	if a == nil {
		a = &record.Volume{Name: name}
	}
	if !d.Wanted() {
		if a.Attachment != nil && a.Attachment.Pinned {
			return Op{}, false // the host booted from it: never torn down
		}
		return teardownOp(name, a, held)
	}
	// Targets published but no longer wanted as they are; a change of
	// flags alone is remounted in place (remountOp), not republished.
	for _, t := range a.Targets {
		want, ok := d.Target(t.Path)
		if (!ok || want.SubPath != t.SubPath) && !coversHeld(t.Path, held) {
			return Op{Volume: name, Name: OpUnpublish, Target: DesiredTarget{Path: t.Path}}, true
		}
	}
	if a.Attachment == nil {
		return Op{Volume: name, Name: OpAttach}, true
	}
	if open, _ := EncryptionChange(d, a); open {
		return Op{Volume: name, Name: OpOpen}, true
	}
	if a.Staging == nil && !d.Block {
		return Op{Volume: name, Name: OpMountDevice}, true
	}
	for _, t := range d.Targets {
		if HasTarget(a, t.Path) {
			continue
		}
		if held.heldByOther(t.Path, name) {
			continue // waits for the other volume to let go
		}
		if t.NestedIn != "" && !enclosedBy(t.Path, t.NestedIn, held) {
			continue // published on top of the enclosing target, so after it
		}
		return Op{Volume: name, Name: OpPublish, Target: t}, true
	}
	return remountOp(name, d, a)
}

func teardownOp(name string, a *record.Volume, held *heldPaths) (Op, bool) {
	for _, t := range a.Targets {
		if !coversHeld(t.Path, held) {
			return Op{Volume: name, Name: OpUnpublish, Target: DesiredTarget{Path: t.Path}}, true
		}
	}
	if len(a.Targets) > 0 {
		return Op{}, false // a nested target still sits on top of ours
	}
	if a.Staging != nil {
		return Op{Volume: name, Name: OpUnmountDevice}, true
	}
	if a.Mapping != nil {
		return Op{Volume: name, Name: OpClose}, true
	}
	if a.Attachment != nil {
		return Op{Volume: name, Name: OpDetach}, true
	}
	return Op{}, false
}

func HasTarget(a *record.Volume, p string) bool {
	for _, t := range a.Targets {
		if t.Path == p {
			return true
		}
	}
	return false
}

// Operation names, as they appear in intents, logs and metrics.
const (
	OpAttach = "attach"
	// OpOpen opens an encrypted volume's dm-crypt mapping; inside it,
	// OpEncrypt writes the LUKS2 header of a blank device first.
	OpOpen          = "open"
	OpEncrypt       = "encrypt"
	OpClose         = "close"
	OpFormat        = "format"
	OpMountDevice   = "mount_device"
	OpPublish       = "publish"
	OpUnpublish     = "unpublish"
	OpUnmountDevice = "unmount_device"
	OpDetach        = "detach"
	OpGrow          = "grow"
	// OpRemount applies changed mount options in place: to the staging
	// mount (Op.Target.Path empty) or to one target.
	OpRemount = "remount"
)

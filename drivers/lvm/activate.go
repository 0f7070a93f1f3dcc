package lvm

import (
	"context"
	"strings"

	"github.com/volumed/volumed/internal/crashpoint"
)

// ActivateError: lvm2 would not activate an LV. Reason says why, from
// lvm2's words (ActivationReason); the error is what it said.
type ActivateError struct {
	Reason string
	Err    error
}

func (e *ActivateError) Error() string { return e.Err.Error() + activationHint[e.Reason] }
func (e *ActivateError) Unwrap() error { return e.Err }

// Reasons an LV will not activate.
const (
	ReasonPVMissing     = "PhysicalVolumeMissing"
	ReasonPoolCheck     = "ThinPoolCheckFailed"
	ReasonTargetMissing = "KernelTargetMissing"
	ReasonFiltered      = "ActivationFiltered"
	ReasonRefused       = "ActivationRefused"
)

// activationHint is what to do, after lvm2's words.
var activationHint = map[string]string{
	ReasonPVMissing:     " (a disk of the volume group is missing: bring it back; a linear or striped LV on it activates only whole, a raid1 LV degraded; lvconvert --repair or vgreduce --removemissing are for when it is gone for good)",
	ReasonPoolCheck:     " (thin_check found the thin pool's metadata damaged: lvconvert --repair the pool)",
	ReasonTargetMissing: " (the device-mapper target's module is not loaded, and volumed's service may not load modules: load it, e.g. modprobe dm-raid, and list it in /etc/modules-load.d/ for the next boots)",
	ReasonFiltered:      " (lvm.conf's activation volume_list or auto_activation_volume_list leaves it out)",
}

// ActivationReason is the one rule for why lvm2 would not activate an LV,
// read from what it said (its messages are its only account of it).
func ActivationReason(said string) string {
	s := strings.ToLower(said)
	switch {
	case strings.Contains(s, "partial lv") || strings.Contains(s, "couldn't find device with uuid") ||
		strings.Contains(s, "missing device") || strings.Contains(s, "missing pv"):
		return ReasonPVMissing
	case strings.Contains(s, "check of pool") || strings.Contains(s, "thin_check"):
		return ReasonPoolCheck
	case strings.Contains(s, "target support missing") || strings.Contains(s, "target(s) not detected") ||
		strings.Contains(s, "target type") && strings.Contains(s, "not supported") || strings.Contains(s, "modprobe"):
		return ReasonTargetMissing
	case strings.Contains(s, "activation filter") || strings.Contains(s, "volume_list"):
		return ReasonFiltered
	}
	return ReasonRefused
}

// Activate activates lv; lvm2's refusal is an *ActivateError.
func (t Tool) Activate(ctx context.Context, lv LV) error {
	_, err := t.run(ctx, "activate LV "+lv.Ref(), ActivateArgs(lv, true))
	if err != nil {
		return &ActivateError{Reason: ActivationReason(err.Error()), Err: err}
	}
	return nil
}

// Create makes w's LV. lvcreate activates it as it makes it: a refusal
// for a kernel target missing (dm-raid, dm-thin-pool not loaded) is an
// *ActivateError, as an activation's is; any other failure (no free
// space) is the plain error. The caller's attach intent is on disk; the
// crash points around lvcreate are the LV's own (the attach's are around
// the whole of it: PVs, VG, pools, LV).
func (t Tool) Create(ctx context.Context, w Want) error {
	crashpoint.HitFor("lvcreate", "after-intent", w.Volume)
	_, err := t.run(ctx, "create LV "+w.Ref(), CreateArgs(w))
	if err != nil && ActivationReason(err.Error()) == ReasonTargetMissing {
		return &ActivateError{Reason: ReasonTargetMissing, Err: err}
	}
	if err == nil {
		crashpoint.HitFor("lvcreate", "after-kernel", w.Volume)
	}
	return err
}

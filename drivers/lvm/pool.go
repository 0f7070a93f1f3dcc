package lvm

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/volumed/volumed/internal/crashpoint"
)

// PoolTagPrefix starts the tag of a thin pool volumed makes in a VG it
// keeps: volumed-pool:<pool>. It is not TagPrefix: a pool is no volume's
// LV, and lvm.Owner never reads it as one.
const PoolTagPrefix = "volumed-pool:"

// PoolTag is the tag of the thin pool name.
func PoolTag(name string) string { return PoolTagPrefix + name }

// PoolWant is a thin pool volumed keeps in a VG it made.
type PoolWant struct {
	VG, Name     string
	Size         int64 // the data's bytes
	MetadataSize int64 // bytes; 0 leaves lvm2's choice
}

// PlanPool is what to do for the pool p over the VG's LVs: the pool is
// the LV carrying its tag, whatever its name; only when none does is the
// name looked at. A thin pool of that name volumed did not make is used
// as it is; an LV of the name that is no thin pool is refused. Nothing
// here resizes or removes a pool.
func PlanPool(p PoolWant, lvs []LV) Step {
	var tagged []LV
	for _, lv := range lvs {
		if slices.Contains(lv.Tags, PoolTag(p.Name)) {
			tagged = append(tagged, lv)
		}
	}
	switch {
	case len(tagged) > 1:
		return Step{Action: Refuse, Why: fmt.Sprintf("%d LVs in %s carry the tag %s: volumed cannot tell which is thin pool %s", len(tagged), p.VG, PoolTag(p.Name), p.Name)}
	case len(tagged) == 1 && tagged[0].Segtype == thinPoolSegtype:
		return Step{Action: Use, LV: tagged[0], Owned: true}
	case len(tagged) == 1:
		return Step{Action: Refuse, LV: tagged[0], Why: fmt.Sprintf("LV %s carries the tag %s but is %s, not a thin pool (lvcreate cut short?): volumed leaves it; remove it or its tag", tagged[0].Ref(), PoolTag(p.Name), tagged[0].Segtype)}
	}
	i := slices.IndexFunc(lvs, func(lv LV) bool { return lv.Name == p.Name })
	switch {
	case i < 0:
		return Step{Action: Create}
	case lvs[i].Segtype == thinPoolSegtype:
		return Step{Action: Use, LV: lvs[i]}
	}
	return Step{Action: Refuse, LV: lvs[i], Why: fmt.Sprintf("LV %s is %s, not a thin pool: volumed makes no pool over it", lvs[i].Ref(), lvs[i].Segtype)}
}

// PoolCreateArgs makes the thin pool p, tagged.
func PoolCreateArgs(devices []string, p PoolWant) []string {
	args := []string{"lvcreate", "--yes", "--type", thinPoolSegtype, "--name", p.Name,
		"--size", strconv.FormatInt(p.Size, 10) + "b"}
	if p.MetadataSize > 0 {
		args = append(args, "--poolmetadatasize", strconv.FormatInt(p.MetadataSize, 10)+"b")
	}
	return Filtered(devices, append(args, "--addtag", PoolTag(p.Name), p.VG)...)
}

// CreatePool makes the thin pool p (lvm2 commits it, its tag with it);
// the caller's intent is on disk, and the next PlanPool finds the pool
// by its tag after a crash.
func (t Tool) CreatePool(ctx context.Context, devices []string, p PoolWant) error {
	crashpoint.Hit("lvcreate-pool", "after-intent")
	if _, err := t.run(ctx, "create thin pool "+p.VG+"/"+p.Name, PoolCreateArgs(devices, p)); err != nil {
		return err
	}
	crashpoint.Hit("lvcreate-pool", "after-kernel")
	return nil
}

package manifest

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/volumed/volumed/internal/safepath"
)

// targetOf is one publish target of an accepted object.
type targetOf struct {
	idx      int // in accepted
	path     string
	nestedIn string
	owner    string // the volume published there
	field    string
}

// refuseUndeclaredNesting refuses a target that lies inside another
// target unless it names that target's volume in nestedIn: undeclared, the
// inner mount could land under the outer one and vanish from view, or pin
// it busy. The object refused is the newcomer: an incumbent keeps working.
func refuseUndeclaredNesting(accepted []acceptedObj, prev map[ownerID]*Object) ([]acceptedObj, []Problem) {
	var ts []targetOf
	for i, a := range accepted {
		if s := a.obj.Volume; s != nil {
			for j, m := range s.Mounts {
				ts = append(ts, targetOf{i, m.Path, m.NestedIn, a.obj.Metadata.Name, fmt.Sprintf("spec.mounts[%d].path", j)})
			}
		}
		if m := a.obj.Mount; m != nil {
			ts = append(ts, targetOf{i, m.Path, m.NestedIn, m.Volume, "spec.path"})
		}
	}
	// Targets by path: a target's containers are found among its
	// ancestors (paths are clean and absolute), not by comparing every
	// pair, which at a thousand volumes was most of reading the manifests.
	at := map[string][]int{}
	for i, t := range ts {
		at[t.path] = append(at[t.path], i)
	}
	refused := map[int]Problem{}
	for _, c := range ts {
		var parents []int
		for dir := c.path; dir != filepath.Dir(dir); {
			dir = filepath.Dir(dir)
			parents = append(parents, at[dir]...)
		}
		slices.Sort(parents) // in the order of ts, as every pair was compared
		for _, pi := range parents {
			p := ts[pi]
			if c.path == p.path || !safepath.Within(c.path, p.path) || c.nestedIn == p.owner {
				continue
			}
			child, parent := accepted[c.idx], accepted[p.idx]
			_, childOld := prev[child.id]
			_, parentOld := prev[parent.id]
			if childOld && !parentOld && parent.obj != child.obj {
				refused[p.idx] = parent.obj.problem(p.field, fmt.Sprintf("would cover target %s of %s, which does not declare nestedIn: %s", c.path, describeObj(child.obj), p.owner))
				continue
			}
			if _, done := refused[c.idx]; !done {
				refused[c.idx] = child.obj.problem(c.field, fmt.Sprintf("is inside target %s of %s; set nestedIn: %s on it to publish it on top of that one", p.path, describeObj(parent.obj), p.owner))
			}
		}
	}
	if len(refused) == 0 {
		return accepted, nil
	}
	kept := accepted[:0:0]
	var probs []Problem
	for i, a := range accepted {
		if p, ok := refused[i]; ok {
			probs = append(probs, p)
			continue
		}
		kept = append(kept, a)
	}
	return kept, probs
}

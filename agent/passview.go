// What the passes know of the records, kept current one volume at a time.

package agent

import (
	"maps"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// passView is the passes' copy of every record, with the version it was
// read at, and the planner over them: a pass copies and plans again
// only the volumes marked (dirtySet), instead of every record and every
// volume (docs/performance.md). Only the reconcile loop uses it.
type passView struct {
	actual   map[string]*store.Volume
	versions map[string]uint64
	planner  *decide.Planner
}

func newPassView() *passView {
	return &passView{actual: map[string]*store.Volume{}, versions: map[string]uint64{}, planner: decide.NewPlanner()}
}

// refresh reads the records of the volumes named again (every record
// when all) and replans them; it returns the volumes replanned.
func (v *passView) refresh(st *State, desired map[string]*Desired, all bool, names []string) []string {
	if all {
		seen := map[string]bool{}
		for n := range v.actual {
			seen[n] = true
		}
		for n := range v.planner.Known() {
			seen[n] = true
		}
		v.actual, v.versions = st.VersionedSnapshot()
		for n := range v.actual {
			seen[n] = true
		}
		for n := range desired {
			seen[n] = true
		}
		names = make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
	} else {
		recs, vers := st.VersionedGet(names)
		for _, n := range names {
			if r := recs[n]; r != nil {
				v.actual[n] = r
			} else {
				delete(v.actual, n)
			}
		}
		maps.Copy(v.versions, vers)
	}
	return v.planner.Update(desired, v.actual, names)
}

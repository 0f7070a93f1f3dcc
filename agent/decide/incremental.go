package decide

import (
	"cmp"
	"slices"

	"github.com/volumed/volumed/store/record"
)

// Planner is Plan and PendingChanges kept up to date one volume at a
// time: a pass replans the volumes whose desired entry or record changed
// and the volumes whose next step reads a published path those changed
// (nextOp says which paths it reads), and keeps every other volume's
// last step. Ops and Pending are then what Plan and PendingChanges give
// over everything (TestIncrementalPassPlansAsAFullPass). Not safe for
// concurrent use: the reconcile loop owns it.
type Planner struct {
	held *heldPaths
	// recorded: each volume's published paths, as held has them.
	recorded map[string][]string
	// wantAt: the volumes that want a target at each path; nestedIn:
	// the volumes with a target nested in each volume's. wants is what
	// each volume was indexed under, to take it out again.
	wantAt   map[string][]string
	nestedIn map[string][]string
	wants    map[string][]DesiredTarget
	ops      map[string]Op
	pending  map[string][]Pending
}

// NewPlanner returns a planner that knows no volume.
func NewPlanner() *Planner {
	return &Planner{held: newHeld(), recorded: map[string][]string{}, wantAt: map[string][]string{},
		nestedIn: map[string][]string{}, wants: map[string][]DesiredTarget{}, ops: map[string]Op{}, pending: map[string][]Pending{}}
}

// Update replans the volumes named in changed (their desired entry or
// record, or both, are not what the planner last saw of them; a volume
// in neither map is forgotten) and every volume whose step reads a path
// their records now hold or no longer hold. It returns the volumes
// replanned, sorted.
func (p *Planner) Update(desired map[string]*Desired, actual map[string]*record.Volume, changed []string) []string {
	replan := map[string]bool{}
	var moved []string   // paths whose holders changed
	var movedBy []string // the volumes that changed them
	for _, n := range changed {
		replan[n] = true
		before := len(moved)
		now := recordedPaths(actual[n])
		for _, q := range p.recorded[n] {
			if !slices.Contains(now, q) {
				p.held.remove(q, n)
				moved = append(moved, q)
			}
		}
		for _, q := range now {
			if !slices.Contains(p.recorded[n], q) {
				p.held.add(q, n)
				moved = append(moved, q)
			}
		}
		if len(now) > 0 {
			p.recorded[n] = now
		} else {
			delete(p.recorded, n)
		}
		if len(moved) > before {
			movedBy = append(movedBy, n)
		}
		p.index(n, desired[n])
	}
	for _, q := range moved {
		p.readersOf(q, replan)
	}
	for _, n := range movedBy {
		for _, r := range p.nestedIn[n] {
			replan[r] = true
		}
	}
	names := make([]string, 0, len(replan))
	for n := range replan {
		names = append(names, n)
		p.replan(n, desired[n], actual[n])
	}
	slices.Sort(names)
	return names
}

// readersOf marks the volumes whose next step reads who holds q, but
// for those nested in a volume (Update marks them by their volume): a
// recorded target above q (coversHeld), a desired target at q.
func (p *Planner) readersOf(q string, replan map[string]bool) {
	for up := range ancestors(q) {
		for _, v := range p.held.by[up] {
			replan[v] = true
		}
	}
	for _, v := range p.wantAt[q] {
		replan[v] = true
	}
}

func (p *Planner) replan(n string, d *Desired, rec *record.Volume) {
	delete(p.ops, n)
	delete(p.pending, n)
	if d == nil && rec == nil {
		return
	}
	if op, ok := nextOp(n, d, rec, p.held); ok {
		p.ops[n] = op
	}
	if pend := PendingChanges(d, rec); len(pend) > 0 {
		p.pending[n] = pend
	}
}

// index files the volume's desired targets under their paths and the
// volumes they nest in, in place of what it was filed under.
func (p *Planner) index(n string, d *Desired) {
	for _, t := range p.wants[n] {
		p.wantAt[t.Path] = removeName(p.wantAt[t.Path], n)
		if len(p.wantAt[t.Path]) == 0 {
			delete(p.wantAt, t.Path)
		}
		if t.NestedIn != "" {
			p.nestedIn[t.NestedIn] = removeName(p.nestedIn[t.NestedIn], n)
			if len(p.nestedIn[t.NestedIn]) == 0 {
				delete(p.nestedIn, t.NestedIn)
			}
		}
	}
	delete(p.wants, n)
	if d == nil || len(d.Targets) == 0 {
		return
	}
	p.wants[n] = slices.Clone(d.Targets)
	for _, t := range d.Targets {
		p.wantAt[t.Path] = addName(p.wantAt[t.Path], n)
		if t.NestedIn != "" {
			p.nestedIn[t.NestedIn] = addName(p.nestedIn[t.NestedIn], n)
		}
	}
}

func addName(names []string, n string) []string {
	if i, found := slices.BinarySearch(names, n); !found {
		return slices.Insert(names, i, n)
	}
	return names
}

func removeName(names []string, n string) []string {
	if i, found := slices.BinarySearch(names, n); found {
		return slices.Delete(names, i, i+1)
	}
	return names
}

func recordedPaths(rec *record.Volume) []string {
	if rec == nil || len(rec.Targets) == 0 {
		return nil
	}
	out := make([]string, 0, len(rec.Targets))
	for _, t := range rec.Targets {
		if !slices.Contains(out, t.Path) {
			out = append(out, t.Path)
		}
	}
	return out
}

// Plan is every volume's next step, as Plan gives it.
func (p *Planner) Plan() []Op {
	ops := make([]Op, 0, len(p.ops))
	for _, op := range p.ops {
		ops = append(ops, op)
	}
	sortOps(ops)
	return ops
}

// Next is the volume's next step, as Plan has it.
func (p *Planner) Next(name string) (Op, bool) {
	op, ok := p.ops[name]
	return op, ok
}

// Decide is Decide's decision from the planner's steps: the operations
// of the volumes named (those Update replanned: no other volume's step
// changed, so starting it again is the caller's to ask for), every
// volume's pending changes (shared: not to be changed), and the growth
// that obs asks for.
func (p *Planner) Decide(desired map[string]*Desired, actual map[string]*record.Volume, obs Observations, names []string) Decision {
	dec := Decision{Pending: p.pending}
	for _, n := range names {
		if op, ok := p.ops[n]; ok {
			dec.Ops = append(dec.Ops, op)
		}
	}
	sortOps(dec.Ops)
	dec.grow(desired, actual, obs, func(n string) bool { _, ok := p.ops[n]; return ok })
	return dec
}

// sortOps orders a pass's operations as Plan does: by stage, then volume.
func sortOps(ops []Op) {
	slices.SortFunc(ops, func(a, b Op) int {
		return cmp.Or(cmp.Compare(a.Stage(), b.Stage()), cmp.Compare(a.Volume, b.Volume))
	})
}

// Known yields the volumes the planner holds anything of (a name may
// come more than once): a full replan must name them too, to forget
// those gone from both desired and actual state.
func (p *Planner) Known() func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for n := range p.recorded {
			if !yield(n) {
				return
			}
		}
		for n := range p.wants {
			if !yield(n) {
				return
			}
		}
		for n := range p.ops {
			if !yield(n) {
				return
			}
		}
		for n := range p.pending {
			if !yield(n) {
				return
			}
		}
	}
}

package manifest

import (
	"fmt"
	"sort"
)

type candidate struct {
	obj *Object
	id  ownerID
}

type acceptedObj struct {
	obj *Object
	id  ownerID
}

// claim is something at most one object may have: its name, its source,
// a target path.
type claim struct {
	key   string
	field string // where the claim is written, for the problem
	what  string // for messages, e.g. "target /srv/data"
}

func claims(o *Object) []claim {
	cs := []claim{{key: "name\x00" + o.Kind + "\x00" + o.Metadata.Name, field: "metadata.name"}}
	if s := o.Volume; s != nil {
		src := s.Source
		for _, c := range src.Caps.Claims {
			field := "spec.source." + src.Kind
			if c.Field != "" {
				field += "." + c.Field
			}
			cs = append(cs, claim{key: "source\x00" + src.Kind + "\x00" + c.Key, field: field, what: c.What})
		}
		for i, m := range s.Mounts {
			cs = append(cs, claim{key: "target\x00" + m.Path, field: fmt.Sprintf("spec.mounts[%d].path", i), what: "target " + m.Path})
		}
	}
	if m := o.Mount; m != nil {
		cs = append(cs, claim{key: "target\x00" + m.Path, field: "spec.path", what: "target " + m.Path})
	}
	return cs
}

func describeObj(o *Object) string {
	return fmt.Sprintf("%s %q (%s:%d)", o.Kind, o.Metadata.Name, o.File, o.Line)
}

func conflictReason(c claim, o, holder *Object) string {
	if c.field == "metadata.name" {
		return fmt.Sprintf("%s %q is already declared in %s:%d", o.Kind, o.Metadata.Name, holder.File, holder.Line)
	}
	return fmt.Sprintf("%s is already used by %s", c.what, describeObj(holder))
}

// resolve runs the cross-object checks. A conflict refuses the later
// object, never both. Earlier means: an object accepted by the previous
// Load (prev) keeps the claims it had then, and otherwise the first in
// file and document order wins, incumbents being considered first. An
// incumbent whose new version is refused keeps its previous version if
// that one still fits.
func resolve(cands []candidate, prev map[ownerID]*Object) ([]acceptedObj, []Problem) {
	res := newResolution(cands, prev)
	for {
		r := res.round()
		r.decide()
		// A reservation whose owner did not end up using it must not
		// refuse anyone: drop such reservations and decide again. Each
		// round drops at least one, so this ends.
		if !r.dropUnusedReservations() {
			return r.result()
		}
	}
}

// resolution is what stays the same across resolve's rounds, but for
// the reservations, which only shrink.
type resolution struct {
	cands   []candidate
	prev    map[ownerID]*Object
	present map[ownerID]int
	order   []int // incumbents first, then newcomers, each in file order
	// reserved holds an incumbent's old claims for it, even against
	// objects considered before it.
	reserved map[string]ownerID
}

func newResolution(cands []candidate, prev map[ownerID]*Object) *resolution {
	res := &resolution{cands: cands, prev: prev, present: map[ownerID]int{}, reserved: map[string]ownerID{}}
	for i, c := range cands {
		res.present[c.id] = i
	}
	res.order = make([]int, 0, len(cands))
	for i, c := range cands {
		if _, inc := prev[c.id]; inc {
			res.order = append(res.order, i)
		}
	}
	for i, c := range cands {
		if _, inc := prev[c.id]; !inc {
			res.order = append(res.order, i)
		}
	}
	for id, o := range prev {
		if _, ok := res.present[id]; ok {
			for _, c := range claims(o) {
				res.reserved[c.key] = id
			}
		}
	}
	return res
}

// round is one pass of resolve over every candidate.
type round struct {
	*resolution
	taken   map[string]*Object
	takenBy map[string]ownerID
	chosen  []*Object
	probs   []indexed
	blocked map[string]bool // reservations that refused someone
}

func (res *resolution) round() *round {
	return &round{
		resolution: res,
		taken:      map[string]*Object{},
		takenBy:    map[string]ownerID{},
		chosen:     make([]*Object, len(res.cands)),
		blocked:    map[string]bool{},
	}
}

// conflict finds the first claim of o (for id) that is taken or reserved
// by another; resKey is the reservation's key when a reservation refused it.
func (r *round) conflict(o *Object, id ownerID) (cl claim, holder *Object, resKey string, bad bool) {
	for _, c := range claims(o) {
		if h, ok := r.taken[c.key]; ok && r.takenBy[c.key] != id {
			return c, h, "", true
		}
		if rid, ok := r.reserved[c.key]; ok && rid != id {
			return c, r.cands[r.present[rid]].obj, c.key, true
		}
	}
	return claim{}, nil, "", false
}

func (r *round) accept(i int, o *Object) {
	r.chosen[i] = o
	for _, c := range claims(o) {
		r.taken[c.key] = o
		r.takenBy[c.key] = r.cands[i].id
	}
}

func (r *round) decide() {
	for _, i := range r.order {
		c := r.cands[i]
		cl, holder, resKey, bad := r.conflict(c.obj, c.id)
		if !bad {
			r.accept(i, c.obj)
			continue
		}
		if resKey != "" {
			r.blocked[resKey] = true
		}
		reason := conflictReason(cl, c.obj, holder)
		if p := r.prev[c.id]; p != nil && p != c.obj {
			if _, _, resKey2, bad2 := r.conflict(p, c.id); !bad2 {
				r.accept(i, p)
				reason += "; its previous version stays in effect"
			} else if resKey2 != "" {
				r.blocked[resKey2] = true
			}
		}
		r.probs = append(r.probs, indexed{i, c.obj.problem(cl.field, reason)})
	}
}

// dropUnusedReservations drops the reservations that refused someone
// but that their owner did not use, and says whether it dropped any.
func (r *round) dropUnusedReservations() bool {
	again := false
	for key := range r.blocked {
		id := r.reserved[key]
		if r.takenBy[key] != id {
			delete(r.reserved, key)
			again = true
		}
	}
	return again
}

func (r *round) result() ([]acceptedObj, []Problem) {
	var out []acceptedObj
	for i, o := range r.chosen {
		if o != nil {
			out = append(out, acceptedObj{obj: o, id: r.cands[i].id})
		}
	}
	// Report in file order, whatever order the claims were decided in.
	sort.SliceStable(r.probs, func(a, b int) bool { return r.probs[a].i < r.probs[b].i })
	ps := make([]Problem, len(r.probs))
	for k, p := range r.probs {
		ps[k] = p.p
	}
	return out, ps
}

type indexed struct {
	i int
	p Problem
}

package manifest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/volumed/volumed/internal/safepath"
)

// Result is what one Load found.
type Result struct {
	Volumes  []*Object // accepted kind Volume, in file order then document order
	Mounts   []*Object // accepted kind Mount, likewise
	Problems []Problem // everything wrong now: bad files, refused objects, waiting Mounts (Warning)
	BadFiles []string  // files refused as a whole now; their last good objects are in Volumes/Mounts
}

// Builder is the desired-state populator's memory: it keeps the last good
// objects of each file, so a file that turns bad keeps its volumes in
// their last good state, and the objects accepted by the previous Load,
// so an object that holds a claim (a name, a source, a target) keeps it
// against a newcomer.
type Builder struct {
	dirs []string
	opts Options

	mu sync.Mutex
	// lastGood is keyed by base name, the identity of a drop-in: an
	// override in a later directory that turns bad falls back to what
	// the name last declared.
	lastGood map[string]goodFile
	accepted map[ownerID]*Object
}

type goodFile struct {
	path string
	objs []*Object
}

// ownerID names an object across Loads. The base name is part of it: the
// same name declared by another file is a different object.
type ownerID struct{ base, kind, name string }

func NewBuilder(dirs []string, opts Options) *Builder {
	return &Builder{
		dirs:     slices.Clone(dirs),
		opts:     opts,
		lastGood: map[string]goodFile{},
		accepted: map[ownerID]*Object{},
	}
}

// Load re-reads every effective file and returns the accepted objects.
func (b *Builder) Load() *Result {
	b.mu.Lock()
	defer b.mu.Unlock()

	e := effectiveFiles(b.dirs, b.opts)
	res := &Result{}
	probs := e.probs

	type entry struct {
		path      string
		forcedBad bool
	}
	entries := map[string]entry{}
	for _, f := range e.files {
		entries[filepath.Base(f)] = entry{path: f}
	}
	// A directory that cannot be listed may still hold the files it held
	// before; they are not gone, only unreadable.
	for base, g := range b.lastGood {
		if slices.Contains(e.failedDirs, filepath.Dir(g.path)) {
			entries[base] = entry{path: g.path, forcedBad: true}
		}
	}
	bases := make([]string, 0, len(entries))
	for base := range entries {
		bases = append(bases, base)
	}
	sort.Strings(bases)

	paths := make([]string, len(bases))
	for i, base := range bases {
		if ent := entries[base]; !ent.forcedBad {
			paths[i] = ent.path
		}
	}
	parsed := parseFiles(paths, b.opts)
	good := map[string]goodFile{}
	var cands []candidate
	for i, base := range bases {
		ent := entries[base]
		var objs []*Object
		ok := false
		if !ent.forcedBad {
			objs = parsed[i].objs
			probs = append(probs, parsed[i].probs...)
			ok = len(parsed[i].probs) == 0
		}
		if ok {
			good[base] = goodFile{path: ent.path, objs: objs}
		} else {
			res.BadFiles = append(res.BadFiles, ent.path)
			if g, had := b.lastGood[base]; had {
				good[base] = g
				objs = g.objs
			}
		}
		for _, o := range objs {
			cands = append(cands, candidate{obj: o, id: ownerID{base, o.Kind, o.Metadata.Name}})
		}
	}
	b.lastGood = good

	accepted, cp := resolve(cands, b.accepted)
	probs = append(probs, cp...)
	accepted, np := refuseUndeclaredNesting(accepted, b.accepted)
	probs = append(probs, np...)
	b.accepted = map[ownerID]*Object{}
	for _, a := range accepted {
		b.accepted[a.id] = a.obj
	}
	res.Volumes, res.Mounts, res.Problems = split(accepted, probs)
	return res
}

// Validate is `volumed validate PATH...`: each path is a file or a
// directory (its manifest files, by base name). It parses every file and
// runs the cross-object checks among all of them, and returns every
// problem. Mounts whose volume is not among them are reported with
// Warning set.
func Validate(paths []string, opts Options) []Problem {
	_, probs := ValidateVolumes(paths, opts)
	return probs
}

// ValidateVolumes is Validate that also returns the volumes it accepted,
// for callers that check more of them (validate's host warnings) without
// reading the files again.
func ValidateVolumes(paths []string, opts Options) ([]*Object, []Problem) {
	var probs []Problem
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			probs = append(probs, Problem{File: p, Reason: "cannot read: " + errText(err)})
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		if opts.CheckOwnership {
			if pr, bad := checkOwner(p, st); bad {
				probs = append(probs, pr)
			}
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			probs = append(probs, Problem{File: p, Reason: "cannot read: " + errText(err)})
			continue
		}
		for _, ent := range ents { // ReadDir sorts by name
			f := filepath.Join(p, ent.Name())
			if isManifestName(ent.Name()) && !isMask(f) {
				files = append(files, f)
			}
		}
	}
	var cands []candidate
	for _, f := range files {
		objs, ps := ParseFile(f, opts)
		probs = append(probs, ps...)
		for _, o := range objs {
			cands = append(cands, candidate{obj: o, id: ownerID{f, o.Kind, o.Metadata.Name}})
		}
	}
	accepted, cp := resolve(cands, nil)
	accepted, np := refuseUndeclaredNesting(accepted, nil)
	vols, _, out := split(accepted, append(append(probs, cp...), np...))
	return vols, out
}

// split sorts the accepted objects into volumes and mounts, adds a
// waiting problem for each Mount whose volume is not accepted, and drops
// repeated problems (a bad directory is reported for each of its files).
func split(accepted []acceptedObj, probs []Problem) (vols, mounts []*Object, out []Problem) {
	declared := map[string]bool{}
	for _, a := range accepted {
		if a.obj.Kind == KindVolume {
			vols = append(vols, a.obj)
			declared[a.obj.Metadata.Name] = true
		}
	}
	for _, a := range accepted {
		if a.obj.Kind != KindMount {
			continue
		}
		mounts = append(mounts, a.obj)
		if v := a.obj.Mount.Volume; !declared[v] {
			p := a.obj.problem("spec.volume", fmt.Sprintf("waiting: volume %q is not declared", v))
			p.Warning = true
			probs = append(probs, p)
		}
	}
	seen := map[Problem]bool{}
	for _, p := range probs {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return vols, mounts, out
}

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
	present := map[ownerID]int{}
	for i, c := range cands {
		present[c.id] = i
	}
	order := make([]int, 0, len(cands))
	for i, c := range cands {
		if _, inc := prev[c.id]; inc {
			order = append(order, i)
		}
	}
	for i, c := range cands {
		if _, inc := prev[c.id]; !inc {
			order = append(order, i)
		}
	}
	// Reservations hold an incumbent's old claims for it, even against
	// objects considered before it.
	reserved := map[string]ownerID{}
	for id, o := range prev {
		if _, ok := present[id]; ok {
			for _, c := range claims(o) {
				reserved[c.key] = id
			}
		}
	}

	for {
		taken := map[string]*Object{}
		takenBy := map[string]ownerID{}
		chosen := make([]*Object, len(cands))
		var probs []indexed
		blocked := map[string]bool{}

		conflict := func(o *Object, id ownerID) (claim, *Object, string, bool) {
			for _, c := range claims(o) {
				if h, ok := taken[c.key]; ok && takenBy[c.key] != id {
					return c, h, "", true
				}
				if r, ok := reserved[c.key]; ok && r != id {
					return c, cands[present[r]].obj, c.key, true
				}
			}
			return claim{}, nil, "", false
		}
		accept := func(i int, o *Object) {
			chosen[i] = o
			for _, c := range claims(o) {
				taken[c.key] = o
				takenBy[c.key] = cands[i].id
			}
		}

		for _, i := range order {
			c := cands[i]
			cl, holder, resKey, bad := conflict(c.obj, c.id)
			if !bad {
				accept(i, c.obj)
				continue
			}
			if resKey != "" {
				blocked[resKey] = true
			}
			reason := conflictReason(cl, c.obj, holder)
			if p := prev[c.id]; p != nil && p != c.obj {
				if _, _, resKey2, bad2 := conflict(p, c.id); !bad2 {
					accept(i, p)
					reason += "; its previous version stays in effect"
				} else if resKey2 != "" {
					blocked[resKey2] = true
				}
			}
			probs = append(probs, indexed{i, c.obj.problem(cl.field, reason)})
		}

		// A reservation whose owner did not end up using it must not
		// refuse anyone: drop such reservations and decide again. Each
		// round drops at least one, so this ends.
		again := false
		for key := range blocked {
			id := reserved[key]
			if takenBy[key] != id {
				delete(reserved, key)
				again = true
			}
		}
		if again {
			continue
		}
		var out []acceptedObj
		for i, o := range chosen {
			if o != nil {
				out = append(out, acceptedObj{obj: o, id: cands[i].id})
			}
		}
		// Report in file order, whatever order the claims were decided in.
		sort.SliceStable(probs, func(a, b int) bool { return probs[a].i < probs[b].i })
		ps := make([]Problem, len(probs))
		for k, p := range probs {
			ps[k] = p.p
		}
		return out, ps
	}
}

type indexed struct {
	i int
	p Problem
}

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

type parsedFile struct {
	objs  []*Object
	probs []Problem
}

// parseFiles parses the files at paths ("" is skipped) on every CPU: one
// after another, a restart with a thousand manifests spent a noticeable
// part of its start parsing before it could look at anything
// (docs/performance.md).
func parseFiles(paths []string, opts Options) []parsedFile {
	out := make([]parsedFile, len(paths))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(paths)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i].objs, out[i].probs = ParseFile(paths[i], opts)
			}
		}()
	}
	for i, p := range paths {
		if p != "" {
			next <- i
		}
	}
	close(next)
	wg.Wait()
	return out
}

package manifest

import (
	"path/filepath"
	"slices"
)

// footprints index what each object put forward claims (its name, its
// source, its targets) and where its targets are, as of the last Load:
// the object of the last parse and the one accepted, whichever differ.
// LoadChanged asks of an object that changed whether it touches any
// other; one that touches none is decided without the rest.
type footprints struct {
	claims  map[ownerID][]string
	holders map[string][]ownerID
	targets map[ownerID][]string
	at      map[string][]ownerID
	under   map[string]int // targets strictly below a directory
}

func newFootprints() *footprints {
	return &footprints{
		claims: map[ownerID][]string{}, holders: map[string][]ownerID{},
		targets: map[ownerID][]string{}, at: map[string][]ownerID{}, under: map[string]int{},
	}
}

// targetPaths are o's publish targets as refuseUndeclaredNesting reads them.
func targetPaths(o *Object) []string {
	var ts []string
	if s := o.Volume; s != nil {
		for _, m := range s.Mounts {
			ts = append(ts, m.Path)
		}
	}
	if m := o.Mount; m != nil {
		ts = append(ts, m.Path)
	}
	return ts
}

// ancestors calls fn with each directory above p, as nesting walks them.
func ancestors(p string, fn func(dir string) bool) bool {
	for dir := p; dir != filepath.Dir(dir); {
		dir = filepath.Dir(dir)
		if !fn(dir) {
			return false
		}
	}
	return true
}

// add puts the claims and targets of objs (nil ones skipped) under id.
func (f *footprints) add(id ownerID, objs ...*Object) {
	for _, o := range objs {
		if o == nil {
			continue
		}
		for _, c := range claims(o) {
			if !slices.Contains(f.claims[id], c.key) {
				f.claims[id] = append(f.claims[id], c.key)
				f.holders[c.key] = append(f.holders[c.key], id)
			}
		}
		for _, t := range targetPaths(o) {
			if slices.Contains(f.targets[id], t) {
				continue
			}
			f.targets[id] = append(f.targets[id], t)
			f.at[t] = append(f.at[t], id)
			ancestors(t, func(dir string) bool { f.under[dir]++; return true })
		}
	}
}

// remove forgets everything of id.
func (f *footprints) remove(id ownerID) {
	for _, k := range f.claims[id] {
		if f.holders[k] = without(f.holders[k], id); len(f.holders[k]) == 0 {
			delete(f.holders, k)
		}
	}
	delete(f.claims, id)
	for _, t := range f.targets[id] {
		if f.at[t] = without(f.at[t], id); len(f.at[t]) == 0 {
			delete(f.at, t)
		}
		ancestors(t, func(dir string) bool {
			if f.under[dir]--; f.under[dir] == 0 {
				delete(f.under, dir)
			}
			return true
		})
	}
	delete(f.targets, id)
}

func without(ids []ownerID, id ownerID) []ownerID {
	if i := slices.Index(ids, id); i >= 0 {
		return slices.Delete(ids, i, i+1)
	}
	return ids
}

// alone reports whether nothing but id claims what id claims, and no
// target lies at, above or below one of id's but that target itself:
// then no conflict and no nesting rule can involve id.
func (f *footprints) alone(id ownerID) bool {
	for _, k := range f.claims[id] {
		if len(f.holders[k]) != 1 {
			return false
		}
	}
	for _, t := range f.targets[id] {
		if len(f.at[t]) != 1 || f.under[t] > 0 {
			return false
		}
		if !ancestors(t, func(dir string) bool { return len(f.at[dir]) == 0 }) {
			return false
		}
	}
	return true
}

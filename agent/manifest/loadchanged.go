// A Load that follows the watch's events: only the files named.

package manifest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
)

// LoadChanged is Load when only the files at paths (what the directory
// watch named: a write, a rename in or out, a removal, a mode change) may
// have changed: only they are looked at, and an object that changed is
// decided against the others' claims as indexed unless it touches one of
// them. Its answer is the one Load would give. Load itself runs when
// there is nothing to go from (the first Load), when a directory changed
// or was not sound at the last Load, or when a path is not an entry of a
// directory (the directory itself: a watch's event on it).
func (b *Builder) LoadChanged(paths []string) *Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	bases, ok := b.namedBases(paths)
	if !ok || !b.incremental || !slices.Equal(dirStates(b.dirs), b.dirs0) {
		return b.loadAll()
	}
	old := map[string]*fileState{}
	for _, base := range bases {
		path, ok := b.effectivePath(base)
		if !ok {
			return b.loadAll()
		}
		prev := b.files[base]
		var next *fileState
		if path != "" {
			next = b.outcome(base, path, false, b.cache.parse(path, b.opts), b.lastGood)
		}
		if prev != nil && prev.path != path {
			b.cache.forget(prev.path)
		}
		if next == nil {
			delete(b.lastGood, base)
		}
		if sameState(prev, next) {
			continue
		}
		old[base] = prev
		b.setFile(base, next)
	}
	switch {
	case len(old) == 0 && b.fixed:
	case b.fixed && b.resolveChanged(old):
		b.resolvedAlone++
	default:
		b.resolvedAll++
		b.resolveAll()
	}
	return b.result()
}

// namedBases are the manifest names among paths, each an entry of one of
// the directories; ok is false when a path is not (the directory itself).
func (b *Builder) namedBases(paths []string) ([]string, bool) {
	seen := map[string]bool{}
	var bases []string
	for _, p := range paths {
		p = filepath.Clean(p)
		dir := filepath.Dir(p)
		if !slices.ContainsFunc(b.dirs, func(d string) bool { return filepath.Clean(d) == dir }) {
			return nil, false
		}
		base := filepath.Base(p)
		if isManifestName(base) && !seen[base] {
			seen[base] = true
			bases = append(bases, base)
		}
	}
	sort.Strings(bases)
	return bases, true
}

// effectivePath is what listing the directories would make of base: the
// entry in the last directory that has one, none if that one is a mask.
// ok is false when an entry cannot be looked at.
func (b *Builder) effectivePath(base string) (string, bool) {
	path := ""
	for _, dir := range b.dirs {
		p := filepath.Join(dir, base)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return "", false
		}
		path = p
		if isMask(p) {
			path = ""
		}
	}
	return path, true
}

func (b *Builder) setFile(base string, f *fileState) {
	i, found := slices.BinarySearch(b.bases, base)
	switch {
	case f == nil && found:
		b.bases = slices.Delete(b.bases, i, i+1)
		delete(b.files, base)
	case f != nil && !found:
		b.bases = slices.Insert(b.bases, i, base)
		b.files[base] = f
	case f != nil:
		b.files[base] = f
	}
}

// sameState: the file puts forward the very objects and problems it did.
func sameState(a, b *fileState) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.path == b.path && a.bad == b.bad && slices.Equal(a.objs, b.objs) && slices.Equal(a.probs, b.probs)
}

// resolveChanged decides the objects of the files that changed (old:
// their states before) without the others, when none of them, before or
// now, touches another object's claims or targets: then every one of
// them now is accepted, and the others' fate and problems are what they
// were. It reports false, having decided nothing, otherwise.
func (b *Builder) resolveChanged(old map[string]*fileState) bool {
	ids := map[ownerID]bool{}
	now := map[ownerID]*Object{}
	for base, f := range old {
		if f != nil {
			for _, o := range f.objs {
				ids[ownerID{base, o.Kind, o.Metadata.Name}] = true
			}
		}
		if f := b.files[base]; f != nil {
			for _, o := range f.objs {
				id := ownerID{base, o.Kind, o.Metadata.Name}
				if now[id] != nil {
					return false
				}
				now[id] = o
				ids[id] = true
			}
		}
	}
	if b.index == nil {
		b.index = b.footprintsNow(old)
	}
	for id := range ids {
		if !b.index.alone(id) {
			return false
		}
	}
	for id := range ids {
		b.index.remove(id)
	}
	for id, o := range now {
		b.index.add(id, o, b.accepted[id])
	}
	for id := range ids {
		if !b.index.alone(id) {
			return false
		}
	}
	for id := range ids {
		delete(b.accepted, id)
	}
	for id, o := range now {
		b.accepted[id] = o
		b.index.remove(id)
		b.index.add(id, o)
	}
	for base := range old {
		delete(b.acceptedOf, base)
		if f := b.files[base]; f != nil {
			for _, o := range f.objs {
				b.acceptedOf[base] = append(b.acceptedOf[base], acceptedObj{obj: o, id: ownerID{base, o.Kind, o.Metadata.Name}})
			}
		}
	}
	return true
}

// dirState is what a Load's listing depends on of a directory itself.
type dirState struct {
	exists, isDir bool
	dev, ino      uint64
	uid           uint32
	mode          fs.FileMode
}

func dirStates(dirs []string) []dirState {
	out := make([]dirState, len(dirs))
	for i, d := range dirs {
		st, err := os.Stat(d)
		if err != nil {
			continue
		}
		out[i] = dirState{exists: true, isDir: st.IsDir(), mode: st.Mode()}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			out[i].dev, out[i].ino, out[i].uid = sys.Dev, sys.Ino, sys.Uid
		}
	}
	return out
}

// footprintsNow indexes every object as the last resolution left them,
// the files that changed since (old) as they were then.
func (b *Builder) footprintsNow(old map[string]*fileState) *footprints {
	f := newFootprints()
	for _, base := range b.bases {
		if _, changed := old[base]; !changed {
			b.addFile(f, base, b.files[base])
		}
	}
	for base, st := range old {
		b.addFile(f, base, st)
	}
	return f
}

func (b *Builder) addFile(f *footprints, base string, st *fileState) {
	if st == nil {
		return
	}
	for _, o := range st.objs {
		id := ownerID{base, o.Kind, o.Metadata.Name}
		f.add(id, o, b.accepted[id])
	}
}

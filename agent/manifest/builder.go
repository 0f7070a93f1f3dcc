package manifest

import (
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
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
	// cache holds each file's parse until the file changes.
	cache *parseCache
}

type goodFile struct {
	path string
	objs []*Object
}

// ownerID names an object across Loads. The base name is part of it: the
// same name declared by another file is a different object.
type ownerID struct{ base, kind, name string }

// NewBuilder starts with what a previous run saved in opts.CacheFile
// (Save), if it was saved by this very binary.
func NewBuilder(dirs []string, opts Options) *Builder {
	b := &Builder{
		dirs:     slices.Clone(dirs),
		opts:     opts,
		lastGood: map[string]goodFile{},
		accepted: map[ownerID]*Object{},
		cache:    newParseCache(),
	}
	if opts.CacheFile != "" {
		b.cache.stored = readStored(opts.CacheFile, b.cache.schema(opts.Kinds))
	}
	return b
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
	parsed := parseFiles(paths, func(p string) parsedFile { return b.cache.parse(p, b.opts) })
	b.cache.keep(paths)
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

type parsedFile struct {
	objs  []*Object
	probs []Problem
}

// parseFiles parses the files at paths ("" is skipped) on every CPU: one
// after another, a restart with a thousand manifests spent a noticeable
// part of its start parsing before it could look at anything
// (docs/performance.md).
func parseFiles(paths []string, parse func(string) parsedFile) []parsedFile {
	out := make([]parsedFile, len(paths))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(paths)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = parse(paths[i])
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

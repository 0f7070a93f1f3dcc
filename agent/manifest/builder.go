package manifest

import (
	"maps"
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

	// What the last Load found, for LoadChanged to change file by file.
	incremental bool // the last full Load found every directory sound
	dirs0       []dirState
	bases       []string // sorted
	files       map[string]*fileState
	dirProbs    []Problem
	conflicts   []Problem
	nesting     []Problem
	acceptedOf  map[string][]acceptedObj // by base name, in document order
	index       *footprints
	// fixed: resolving the same files again would give the same answer.
	fixed bool
	// resolvedAlone and resolvedAll count how LoadChanged decided.
	resolvedAlone, resolvedAll int
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
		b.cache.readStoredAside(opts.CacheFile, b.cache.schema(opts.Kinds))
	}
	return b
}

// Load re-reads every effective file and returns the accepted objects.
// It is the safety net of LoadChanged: the directories listed, every file
// looked at, every claim resolved again.
func (b *Builder) Load() *Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loadAll()
}

func (b *Builder) loadAll() *Result {
	e := effectiveFiles(b.dirs, b.opts)
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
	prevGood := b.lastGood
	b.lastGood = map[string]goodFile{}
	b.files = make(map[string]*fileState, len(bases))
	for i, base := range bases {
		ent := entries[base]
		b.files[base] = b.outcome(base, ent.path, ent.forcedBad, parsed[i], prevGood)
	}
	b.bases = bases
	b.dirProbs = e.probs
	b.dirs0 = dirStates(b.dirs)
	// A directory that failed or is not trusted is left to this path:
	// what it lists, and what its files are refused for, is read afresh.
	b.incremental = len(e.failedDirs) == 0 && len(e.probs) == 0
	b.resolveAll()
	return b.result()
}

// fileState is what one effective file put forward at the last Load.
type fileState struct {
	path      string
	forcedBad bool
	probs     []Problem // its own problems, as parsed
	bad       bool
	objs      []*Object // parsed when good, its last good ones when bad
}

// outcome is a file's state from its parse: a refused file keeps its
// last good objects (prevGood); b.lastGood takes its good ones.
func (b *Builder) outcome(base, path string, forcedBad bool, p parsedFile, prevGood map[string]goodFile) *fileState {
	f := &fileState{path: path, forcedBad: forcedBad}
	ok := false
	if !forcedBad {
		f.objs, f.probs = p.objs, p.probs
		ok = len(p.probs) == 0
	}
	if ok {
		b.lastGood[base] = goodFile{path: path, objs: p.objs}
		return f
	}
	f.bad = true
	if g, had := prevGood[base]; had {
		b.lastGood[base] = g
		f.objs = g.objs
	}
	return f
}

// resolveAll runs the cross-object checks over every object put forward.
func (b *Builder) resolveAll() {
	var cands []candidate
	for _, base := range b.bases {
		for _, o := range b.files[base].objs {
			cands = append(cands, candidate{obj: o, id: ownerID{base, o.Kind, o.Metadata.Name}})
		}
	}
	accepted, cp := resolve(cands, b.accepted)
	accepted, np := refuseUndeclaredNesting(accepted, b.accepted)
	b.conflicts, b.nesting = cp, np
	prev := b.accepted
	b.accepted = make(map[ownerID]*Object, len(accepted))
	b.acceptedOf = map[string][]acceptedObj{}
	for _, a := range accepted {
		b.accepted[a.id] = a.obj
		b.acceptedOf[a.id.base] = append(b.acceptedOf[a.id.base], a)
	}
	// What a Load accepted is the next one's incumbents, considered
	// first: where a conflict was decided, the next resolution of the
	// very same files may word it otherwise (another claim found first)
	// unless the incumbents are the same.
	b.fixed = len(cp)+len(np) == 0 || maps.EqualFunc(prev, b.accepted, func(a, b *Object) bool { return a == b })
	b.index = nil // built when LoadChanged first needs it: a restart never does
}

// result assembles a Load's answer from what each file put forward and
// the last resolution, in the order a Load has always given it.
func (b *Builder) result() *Result {
	res := &Result{}
	probs := slices.Clone(b.dirProbs)
	var accepted []acceptedObj
	for _, base := range b.bases {
		f := b.files[base]
		probs = append(probs, f.probs...)
		if f.bad {
			res.BadFiles = append(res.BadFiles, f.path)
		}
		accepted = append(accepted, b.acceptedOf[base]...)
	}
	probs = append(probs, b.conflicts...)
	probs = append(probs, b.nesting...)
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

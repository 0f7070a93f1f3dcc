package manifest

import (
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// parseCache keeps each file's parse (its objects and problems) under the
// file's identity, so that a Load decodes only the files that changed:
// YAML decoding of every manifest was most of a restart's and of each
// rescan's cost (docs/performance.md). Every check that does not read the
// file (ownership, type, size) is still made at each Load; the parse of
// the same bytes is the same, so a hit's problems are those a fresh parse
// would give.
type parseCache struct {
	now func() time.Time
	// mu guards the map and the count: files are parsed on every CPU.
	mu      sync.Mutex
	entries map[string]cachedParse
	// stored: what a previous run saved (Builder.Save), each file taken
	// out at its first look; restored counts those used.
	stored   map[string]storedFile
	restored int
	// storedAside: the decode of what a previous run saved, under way
	// (readStoredAside); nil once taken into stored.
	storedAside <-chan map[string]storedFile
	// decoded counts the files read and parsed, for the tests.
	decoded int
	key     string // schemaKey, once computed
}

type cachedParse struct {
	id identity
	parsedFile
}

// identity is what changes when a file's bytes may have: a rename in of
// another file (dev, inode), a write (size, mtime), and anything that
// keeps those but not the change time (ctime, which no one can set back).
type identity struct {
	dev, ino uint64
	size     int64
	mtime    syscall.Timespec
	ctime    syscall.Timespec
}

// racyWindow: a file changed this recently is parsed again at the next
// Load instead of trusted by its identity: a second write within the
// timestamps' granularity (a tick, or a second on some filesystems) that
// keeps the size would keep the identity too.
const racyWindow = 2 * time.Second

func newParseCache() *parseCache {
	return &parseCache{now: time.Now, entries: map[string]cachedParse{}}
}

func identityOf(st fs.FileInfo) (identity, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return identity{}, false
	}
	return identity{dev: sys.Dev, ino: sys.Ino, size: sys.Size, mtime: sys.Mtim, ctime: sys.Ctim}, true
}

// parse is ParseFile through the cache; the caller forgets what it no
// longer asks for (keep).
func (c *parseCache) parse(path string, opts Options) parsedFile {
	if out, hit := c.unchanged(path, opts); hit {
		return out
	}
	f, st, prob, ok := openChecked(path, opts)
	if !ok {
		return parsedFile{probs: []Problem{prob}}
	}
	defer f.Close()
	id, known := identityOf(st)
	c.mu.Lock()
	e, hit := c.entries[path]
	if !hit || !known || e.id != id {
		c.decoded++
	}
	c.mu.Unlock()
	if hit && known && e.id == id {
		return e.parsedFile
	}
	data, prob, ok := readOpened(f)
	if !ok {
		return parsedFile{probs: []Problem{prob}}
	}
	var out parsedFile
	out.objs, out.probs = ParseBytes(path, data, opts)
	changed := time.Unix(id.ctime.Unix())
	if m := time.Unix(id.mtime.Unix()); m.After(changed) {
		changed = m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if known && c.now().Sub(changed) >= racyWindow {
		c.entries[path] = cachedParse{id: id, parsedFile: out}
	} else {
		delete(c.entries, path)
	}
	return out
}

// unchanged is the cached parse of the file at path when the name still
// leads to the file parsed, unchanged, and every check passes: a stat,
// not an open, per file. Anything else (a miss, a check that fails) is
// left to the whole path, which says what is wrong as a fresh parse does.
func (c *parseCache) unchanged(path string, opts Options) (parsedFile, bool) {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || st.Size() > MaxFileSize {
		return parsedFile{}, false
	}
	id, known := identityOf(st)
	c.mu.Lock()
	c.takeStored()
	e, hit := c.entries[path]
	sf, saved := c.stored[path]
	delete(c.stored, path)
	c.mu.Unlock()
	if known && !hit && saved && sf.identity() == id {
		e, hit = c.restore(path, sf, opts)
	}
	if !known || !hit || e.id != id {
		return parsedFile{}, false
	}
	if opts.CheckOwnership {
		if _, bad := checkOwner(path, st); bad {
			return parsedFile{}, false
		}
		dir, err := os.Stat(filepath.Dir(path))
		if err != nil {
			return parsedFile{}, false
		}
		if _, bad := checkOwner(filepath.Dir(path), dir); bad {
			return parsedFile{}, false
		}
	}
	return e.parsedFile, true
}

// keep forgets every file but those at paths.
func (c *parseCache) keep(paths []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
	for p := range c.entries {
		if !want[p] {
			delete(c.entries, p)
		}
	}
	// What was saved of a file no longer there is of no further use.
	c.stored, c.storedAside = nil, nil
}

// restore takes a file's parse from what a previous run saved, which the
// validator passes again; the entry is then the cache's as if parsed.
func (c *parseCache) restore(path string, sf storedFile, opts Options) (cachedParse, bool) {
	objs, ok := restore(path, sf, opts)
	if !ok {
		return cachedParse{}, false
	}
	e := cachedParse{id: sf.identity(), parsedFile: parsedFile{objs: objs}}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[path] = e
	c.restored++
	return e, true
}

// readStoredAside decodes what a previous run saved on a goroutine of
// its own, which the first look at a file waits for: the decode was
// the largest part of an agent's set-up at 1000 manifests
// (docs/performance.md), and the state file is opened, the firmware
// read and the sockets served meanwhile, on the other core. The
// goroutine reads one file and ends; the parse cache owns its result.
func (c *parseCache) readStoredAside(path, schema string) {
	ch := make(chan map[string]storedFile, 1)
	c.storedAside = ch
	go func() { ch <- readStored(path, schema) }()
}

// takeStored waits for the decode readStoredAside began, if any; c.mu
// is held.
func (c *parseCache) takeStored() {
	if c.storedAside != nil {
		c.stored = <-c.storedAside
		c.storedAside = nil
	}
}

// storable is every clean file's parse, in its stored form.
func (c *parseCache) storable() map[string]storedFile {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]storedFile, len(c.entries))
	for p, e := range c.entries {
		if len(e.probs) > 0 {
			continue // a refused file is parsed again: its problems say what is wrong now
		}
		sf := e.id.stored()
		sf.Objs = storeObjects(e.objs)
		out[p] = sf
	}
	return out
}

func (c *parseCache) schema(kinds Kinds) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key == "" {
		c.key = schemaKey(kinds)
	}
	return c.key
}

func (c *parseCache) has(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[path]
	return ok
}

// forget drops the parse of the file at path.
func (c *parseCache) forget(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, path)
}

// The parse cache kept across restarts, beside the state.

package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"syscall"

	"github.com/volumed/volumed/internal/durable"
)

// cacheSchema is the persisted form's version: bump it with any change
// to storedFile or storedObject. The binary's own identity is part of
// the key too (schemaKey), so an upgrade never reads an entry an older
// parser wrote, whatever this says.
const cacheSchema = "volumed-manifest-cache/1"

// storedCache is the file: the schema key it was written under and each
// clean file's objects under the file's identity.
type storedCache struct {
	Schema string                `json:"schema"`
	Files  map[string]storedFile `json:"files"`
}

type storedFile struct {
	Dev   uint64         `json:"dev"`
	Ino   uint64         `json:"ino"`
	Size  int64          `json:"size"`
	Mtime [2]int64       `json:"mtime"`
	Ctime [2]int64       `json:"ctime"`
	Objs  []storedObject `json:"objects"`
}

// storedObject is an Object as decoded, before the validator filled it
// in: a restore runs the validator again (Caps, defaults, the checks
// that read other files).
type storedObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Name       string            `json:"name"`
	Line       int               `json:"line"`
	Volume     *VolumeSpec       `json:"volume,omitempty"`
	Mount      *MountSpec        `json:"mount,omitempty"`
	Pos        map[string][2]int `json:"pos"`
}

func (id identity) stored() storedFile {
	return storedFile{Dev: id.dev, Ino: id.ino, Size: id.size,
		Mtime: [2]int64{id.mtime.Sec, id.mtime.Nsec}, Ctime: [2]int64{id.ctime.Sec, id.ctime.Nsec}}
}

func (s storedFile) identity() identity {
	return identity{dev: s.Dev, ino: s.Ino, size: s.Size,
		mtime: syscall.Timespec{Sec: s.Mtime[0], Nsec: s.Mtime[1]}, ctime: syscall.Timespec{Sec: s.Ctime[0], Nsec: s.Ctime[1]}}
}

// schemaKey names the parser that wrote a cache: the persisted form's
// version, the running binary's identity (a rebuilt or upgraded binary
// has a new one) and the source kinds it knows.
func schemaKey(kinds Kinds) string { return schemaKeyOf(cacheSchema, kinds) }

func schemaKeyOf(version string, kinds Kinds) string {
	h := sha256.New()
	fmt.Fprintln(h, version)
	if st, err := os.Stat("/proc/self/exe"); err == nil {
		if id, ok := identityOf(st); ok {
			fmt.Fprintln(h, id.dev, id.ino, id.size, id.mtime.Sec, id.mtime.Nsec)
		}
	}
	for _, n := range kinds.Names() {
		fmt.Fprintln(h, n)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readStored reads a cache written under the same schema key; anything
// else (no file, a torn or foreign file, another binary's) is no cache:
// every file is then parsed, as on a first start.
func readStored(path, schema string) map[string]storedFile {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var c storedCache
	if err := json.Unmarshal(data, &c); err != nil || c.Schema != schema {
		return nil
	}
	return c.Files
}

// restore rebuilds a file's objects from what was stored and runs the
// validator over them again; false (parse the file) when it refuses
// anything or a kind is unknown: a stored file is one that had no
// problem, and what is wrong with a file is said by a fresh parse.
func restore(path string, sf storedFile, opts Options) ([]*Object, bool) {
	objs := make([]*Object, 0, len(sf.Objs))
	for _, so := range sf.Objs {
		o := &Object{APIVersion: so.APIVersion, Kind: so.Kind, Metadata: Metadata{Name: so.Name},
			Volume: so.Volume, Mount: so.Mount, File: path, Line: so.Line, pos: make(map[string]position, len(so.Pos))}
		for f, p := range so.Pos {
			o.pos[f] = position{p[0], p[1]}
		}
		if o.Volume != nil && !restoreSource(&o.Volume.Source, opts.Kinds) {
			return nil, false
		}
		if (o.Volume == nil) == (o.Mount == nil) {
			return nil, false
		}
		v := &validator{obj: o, opts: opts, bad: map[string]bool{}}
		v.object(true, true)
		if len(v.probs) > 0 {
			return nil, false
		}
		objs = append(objs, o)
	}
	return objs, true
}

// restoreSource decodes the member Source.UnmarshalJSON kept raw into
// its kind's own type, as the YAML walk does.
func restoreSource(src *Source, kinds Kinds) bool {
	raw, ok := src.Spec.(json.RawMessage)
	if !ok {
		return false
	}
	k, ok := kinds.Lookup(src.Kind)
	if !ok {
		return false
	}
	spec := k.New()
	if err := json.Unmarshal(raw, spec); err != nil {
		return false
	}
	src.Spec, src.more = spec, []member{{k, spec}}
	return true
}

// storeObjects is the stored form of a clean file's objects.
func storeObjects(objs []*Object) []storedObject {
	out := make([]storedObject, 0, len(objs))
	for _, o := range objs {
		so := storedObject{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Metadata.Name, Line: o.Line,
			Volume: o.Volume, Mount: o.Mount, Pos: make(map[string][2]int, len(o.pos))}
		for f, p := range o.pos {
			so.Pos[f] = [2]int{p.line, p.col}
		}
		out = append(out, so)
	}
	return out
}

// Save writes the parse of every clean file the last Load read to the
// cache file (Options.CacheFile), atomically: a restart then decodes
// only the files that changed while the agent was away.
func (b *Builder) Save() error {
	if b.opts.CacheFile == "" {
		return nil
	}
	b.mu.Lock()
	// A file read within the racy window of its last change was not
	// kept (parseCache.parse): read it again now, past it, or the first
	// start after the files were written would keep nothing.
	var racy []string
	for _, g := range b.lastGood {
		if !b.cache.has(g.path) {
			racy = append(racy, g.path)
		}
	}
	parseFiles(racy, func(p string) parsedFile { return b.cache.parse(p, b.opts) })
	c := storedCache{Schema: b.cache.schema(b.opts.Kinds), Files: b.cache.storable()}
	b.mu.Unlock()
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("manifest cache: %w", err)
	}
	if err := durable.WriteFile(b.opts.CacheFile, data, 0o600); err != nil {
		return fmt.Errorf("manifest cache: %w", err)
	}
	return nil
}

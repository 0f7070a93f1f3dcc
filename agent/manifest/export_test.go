package manifest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Decoded counts the files b has read and parsed, for the cache's tests.
func (b *Builder) Decoded() int {
	b.cache.mu.Lock()
	defer b.cache.mu.Unlock()
	return b.cache.decoded
}

// SetClock sets the clock b's cache tells a recent change by.
func (b *Builder) SetClock(now func() time.Time) { b.cache.now = now }

// Restored counts the files b took from a saved cache.
func (b *Builder) Restored() int {
	b.cache.mu.Lock()
	defer b.cache.mu.Unlock()
	return b.cache.restored
}

// SetCacheSchema is a saved cache file's data with its schema's
// version (the part a change to the stored form bumps) replaced.
func SetCacheSchema(t interface{ Fatal(...any) }, data []byte, version string) []byte {
	var c storedCache
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	c.Schema = schemaKeyOf(version, nil)
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Resolved counts the LoadChanged resolutions decided for the changed
// objects alone and those that resolved every object.
func (b *Builder) Resolved() (alone, all int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resolvedAlone, b.resolvedAll
}

// AcceptedDebug renders what b accepted at its last Load.
func (b *Builder) AcceptedDebug() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id, o := range b.accepted {
		out = append(out, fmt.Sprintf("%s/%s/%s=%s:%d:%v", id.base, id.kind, id.name, o.File, o.Line, o.Volume != nil && len(o.Volume.Mounts) > 0 && o.Volume.Mounts[0].Path != ""))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

package manifest

import "time"

// Decoded counts the files b has read and parsed, for the cache's tests.
func (b *Builder) Decoded() int {
	b.cache.mu.Lock()
	defer b.cache.mu.Unlock()
	return b.cache.decoded
}

// SetClock sets the clock b's cache tells a recent change by.
func (b *Builder) SetClock(now func() time.Time) { b.cache.now = now }

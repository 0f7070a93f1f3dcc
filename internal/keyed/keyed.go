// Package keyed holds small concurrency helpers keyed by name, shared by
// the drivers: a mutex per key and a context-aware sleep.
package keyed

import (
	"context"
	"sync"
	"time"
)

// Mutex is one lock per key (an iSCSI target, an NVMe subsystem at an
// address), so that work on one key is serialized while different keys
// do not wait for each other. The zero value is ready; a host has few
// keys, so they are kept.
type Mutex struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Lock takes the lock of key and returns its release.
func (k *Mutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*sync.Mutex{}
	}
	m := k.locks[key]
	if m == nil {
		m = new(sync.Mutex)
		k.locks[key] = m
	}
	k.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Sleep waits d or until ctx ends, whichever is first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

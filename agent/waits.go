// What each volume whose attach waits is waiting for.

package agent

import (
	"errors"
	"sync"
)

// waits keep, per volume, what its last attach said it waits for
// (Waiting), which decide.Concerns weighs against each kernel event. A
// volume absent waits for nothing stated: any device added or removed
// retries it. The zero value is ready; nothing is kept across restarts
// (the first attach states it again).
type waits struct {
	mu sync.Mutex
	m  map[string]Awaited
}

// attached records how volume name's attach ended: what it waits for
// when err is a Waiting, nothing otherwise.
func (w *waits) attached(name string, err error) {
	var wt *Waiting
	w.mu.Lock()
	defer w.mu.Unlock()
	if !errors.As(err, &wt) {
		delete(w.m, name)
		return
	}
	if w.m == nil {
		w.m = map[string]Awaited{}
	}
	w.m[name] = wt.For
}

// of is what volume name waits for; nil when its wait stated nothing.
func (w *waits) of(name string) *Awaited {
	w.mu.Lock()
	defer w.mu.Unlock()
	if aw, ok := w.m[name]; ok {
		return &aw
	}
	return nil
}

func (w *waits) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, name)
}

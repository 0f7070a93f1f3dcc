// Package readonce shares a program's report among everyone who asks
// for it during one look at the host: the core opens a window in the
// context (a start, a pass, a resync, an operation) and a driver reads
// through it, so that ten questions asked of one lvm2 report in that
// window run it once. A write the driver makes through the same window
// drops what was read (every later read runs again), so a window never
// answers with what was true before its own writes.
//
// A window is only a snapshot taken earlier: a read served from it is
// what a read at its first ask would have said. The core opens windows
// no longer than a start, a pass or an operation, so it is never older
// than that. No window in the context: every read runs.
package readonce

import (
	"context"
	"sync"
)

// Window holds the reads of one look at the host.
type Window struct {
	mu    sync.Mutex
	gen   uint64 // moved by every write
	reads map[string]read
}

type read struct {
	gen uint64
	out []byte
}

type windowKey struct{}

// Open returns ctx with a new, empty window: whatever window ctx held is
// not seen through it.
func Open(ctx context.Context) context.Context {
	return context.WithValue(ctx, windowKey{}, &Window{})
}

func of(ctx context.Context) *Window {
	w, _ := ctx.Value(windowKey{}).(*Window)
	return w
}

// Read returns what run returned for key in ctx's window, running it
// only when the window has no answer since its last write. A failed run
// is not kept: the next ask runs again. key names the report exactly
// (the program's arguments).
func Read(ctx context.Context, key string, run func() ([]byte, error)) ([]byte, error) {
	w := of(ctx)
	if w == nil {
		return run()
	}
	w.mu.Lock()
	r, ok := w.reads[key]
	gen := w.gen
	w.mu.Unlock()
	if ok && r.gen == gen {
		return r.out, nil
	}
	out, err := run()
	if err != nil {
		return out, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// A write that began or ended while it ran may be half in it.
	if w.gen == gen {
		if w.reads == nil {
			w.reads = map[string]read{}
		}
		w.reads[key] = read{gen: gen, out: out}
	}
	return out, nil
}

// Held returns the answer ctx's window holds for key, without running
// anything: a report another can be read out of.
func Held(ctx context.Context, key string) ([]byte, bool) {
	w := of(ctx)
	if w == nil {
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.reads[key]
	if !ok || r.gen != w.gen {
		return nil, false
	}
	return r.out, true
}

// Write runs write, a change to what the window's reads report: every
// read after it (and any that ran beside it) runs again.
func Write(ctx context.Context, write func() error) error {
	w := of(ctx)
	if w == nil {
		return write()
	}
	w.bump()
	defer w.bump()
	return write()
}

func (w *Window) bump() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	clear(w.reads)
}

// The API's long poll: a caller waits for volumes to be Ready without polling the status.

package agent

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/volumed/volumed/agent/api"
)

// statusWatch wakes the callers of GET /v1/wait after each pass, instead
// of each polling the whole status (volumed wait asked 10 times a second,
// one process per waiting unit: under emulation eleven of them took most
// of a guest's CPU while its volumes came up). The status built after a
// pass is shared by every caller that pass woke.
type statusWatch struct {
	mu  sync.Mutex // guards gen and ch; never held while a status is built
	gen uint64
	ch  chan struct{}

	buildMu   sync.Mutex // guards the three below; held while one is built
	builtAt   uint64
	builtWhen time.Time
	built     *api.Status
}

// statusShelfLife bounds how long a shared status is handed out within
// one generation: a pass follows whatever changes a volume's phase, and
// this covers any change that came without one.
const statusShelfLife = time.Second

// passDone wakes every caller waiting for a pass.
func (w *statusWatch) passDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// next returns the generation now and a channel the next pass closes.
func (w *statusWatch) next() (uint64, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.gen, w.ch
}

// status returns the status built at generation gen, building it (with
// build) only if no caller has yet, or it is older than statusShelfLife.
func (w *statusWatch) status(gen uint64, now time.Time, build func() api.Status) *api.Status {
	w.buildMu.Lock()
	defer w.buildMu.Unlock()
	if w.built == nil || w.builtAt != gen || now.Sub(w.builtWhen) >= statusShelfLife {
		st := build()
		w.built, w.builtAt, w.builtWhen = &st, gen, now
	}
	return w.built
}

// waitWindow bounds one GET /v1/wait: the caller asks again, so a volume
// that never comes up costs a status every window, and a client sees the
// reasons at least that often.
const (
	waitWindowDefault = 10 * time.Second
	waitWindowMax     = time.Minute
)

// serveWait answers GET /v1/wait?volume=NAME...&timeout=D once every
// named volume is usable (api.NotReady) or D has passed, with the status
// of the named volumes either way.
func (a *Agent) serveWait(w http.ResponseWriter, r *http.Request) {
	if !a.started() {
		http.Error(w, errStarting, http.StatusServiceUnavailable)
		return
	}
	q := r.URL.Query()
	names := q["volume"]
	if len(names) == 0 {
		http.Error(w, "name at least one volume: ?volume=NAME", http.StatusBadRequest)
		return
	}
	window := waitWindowDefault
	if s := q.Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			http.Error(w, "timeout: want a positive duration such as 10s, got "+s, http.StatusBadRequest)
			return
		}
		window = min(d, waitWindowMax)
	}
	timer := time.NewTimer(window)
	defer timer.Stop()
	for {
		gen, next := a.waiters.next()
		st := a.waiters.status(gen, a.cfg.Now(), a.StatusReply)
		if len(api.NotReady(st, names)) == 0 {
			writeJSON(w, namedOnly(st, names))
			return
		}
		select {
		case <-next:
		case <-timer.C:
			writeJSON(w, namedOnly(st, names))
			return
		case <-r.Context().Done():
			return
		}
	}
}

// namedOnly is st with only the named volumes: a waiter needs no others.
func namedOnly(st *api.Status, names []string) api.Status {
	out := *st
	out.Volumes = nil
	for _, v := range st.Volumes {
		if slices.Contains(names, v.Name) {
			out.Volumes = append(out.Volumes, v)
		}
	}
	return out
}

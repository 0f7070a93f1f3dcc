// The operations' history, per volume, for the status.

package agent

import (
	"sync"

	"github.com/volumed/volumed/agent/api"
)

const eventsKept = 20

// history keeps the last eventsKept operations of each volume.
type history struct {
	mu     sync.Mutex
	events map[string][]api.Event
}

func newHistory() *history { return &history{events: map[string][]api.Event{}} }

func (h *history) add(volume string, ev api.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	evs := append(h.events[volume], ev)
	if len(evs) > eventsKept {
		evs = evs[len(evs)-eventsKept:]
	}
	h.events[volume] = evs
}

// of returns a copy of a volume's events, oldest first.
func (h *history) of(volume string) []api.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]api.Event(nil), h.events[volume]...)
}

// has: the volume has a history.
func (h *history) has(volume string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.events[volume]
	return ok
}

func (h *history) forget(volume string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.events, volume)
}

// Why an attacher chose what a volume recorded, for the status.

package agent

import "sync"

// choiceNotes keep, per volume, why its attacher chose the attachment it
// recorded among several (a disk selector that matched more than one
// disk): the status shows it beside the Ready volume, so a selector that
// is not specific enough is seen before a second disk makes it matter.
// The zero value is ready; notes are not kept across restarts.
type choiceNotes struct {
	mu sync.Mutex
	m  map[string]string
}

func (n *choiceNotes) set(name, note string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if note == "" {
		delete(n.m, name)
		return
	}
	if n.m == nil {
		n.m = map[string]string{}
	}
	n.m[name] = note
}

func (n *choiceNotes) get(name string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.m[name]
}

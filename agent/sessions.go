// The shared kernel objects volumed made. Who owns an attachment, and
// whether it may be torn down, is decided in agent/decide (Owns,
// MayRelease); this is what those rules are told of sessions.
//
// One word, Owned, says "volumed made it, so it may take it down": on a
// Found (the kernel object carries our marker, or the attach made it),
// on a record (store.Attachment.Owned) and for a shared kernel object
// (ownedSessions).

package agent

import (
	"sync"
)

// ownedSessions are the shared kernel objects (iSCSI sessions, NVMe
// controllers) volumed made, by sessionKey: the last volume on one
// releases it, whichever volume made it. It is known at once, before
// any record is, so that a volume joining the session a moment later
// sees that it is ours.
type ownedSessions struct {
	mu   sync.Mutex
	keys map[string]bool
}

func newOwnedSessions() *ownedSessions { return &ownedSessions{keys: map[string]bool{}} }

func (s *ownedSessions) add(key string) {
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = true
}

func (s *ownedSessions) has(key string) bool {
	if key == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key]
}

func (s *ownedSessions) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

// sessionKey names a shared kernel object across drivers; "" for none.
func sessionKey(kind, session string) string {
	if session == "" {
		return ""
	}
	return kind + "\x00" + session
}

// Who owns an attachment, and whether it may be torn down.
//
// One word, Owned, says "volumed made it, so it may take it down": on a
// Found (the kernel object carries our marker), on a record
// (store.Attachment.Owned) and for a shared kernel object (ownedSessions).

package agent

import (
	"slices"
	"sync"

	"github.com/volumed/volumed/store"
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
func sessionKey(driver, session string) string {
	if session == "" {
		return ""
	}
	return driver + "\x00" + session
}

// mayRelease decides whether detaching at tears its kernel object down
// (a loop device freed, an iSCSI session logged out, an NVMe controller
// disconnected) or only forgets it. others are the attachments other
// volumes hold through the same driver; sessionOwned says volumed made
// the session at rides, whichever volume did. It is the one place this
// is decided: the adapters' Detach is called only when it says yes.
//
// Never released: what the host booted from (Pinned), what volumed did
// not make (another tool's session, a disk), and a session another
// volume still rides.
func mayRelease(at store.Attachment, others []store.Attachment, sessionOwned bool) bool {
	if at.Pinned {
		return false
	}
	if !at.Owned && !(at.Session != "" && sessionOwned) {
		return false
	}
	return !sessionShared(at, others)
}

// sessionShared: another volume still rides the session at uses.
func sessionShared(at store.Attachment, others []store.Attachment) bool {
	return at.Session != "" && slices.ContainsFunc(others, func(o store.Attachment) bool { return o.Session == at.Session })
}

// sessionOwnedBy: one of others, riding session, is owned (made by
// volumed), so a volume joining the session owns it too.
func sessionOwnedBy(others []store.Attachment, session string) bool {
	return session != "" && slices.ContainsFunc(others, func(o store.Attachment) bool { return o.Session == session && o.Owned })
}

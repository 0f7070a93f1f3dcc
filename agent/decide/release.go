package decide

import (
	"slices"

	"github.com/volumed/volumed/store/record"
)

// MayRelease decides whether detaching at tears its kernel object down
// (a loop device freed, an iSCSI session logged out, an NVMe controller
// disconnected) or only forgets it. others are the attachments other
// volumes hold through the same driver; sessionOwned says volumed made
// the session at rides, whichever volume did. It is the one place this
// is decided: the adapters' Detach is called only when it says yes.
//
// Never released: what the host booted from (Pinned), what volumed did
// not make (another tool's session, a disk), and a session another
// volume still rides.
func MayRelease(at record.Attachment, others []record.Attachment, sessionOwned bool) bool {
	if at.Pinned {
		return false
	}
	if !at.Owned && !(at.Session != "" && sessionOwned) {
		return false
	}
	return !sessionShared(at, others)
}

// sessionShared: another volume still rides the session at uses.
func sessionShared(at record.Attachment, others []record.Attachment) bool {
	return at.Session != "" && slices.ContainsFunc(others, func(o record.Attachment) bool { return o.Session == at.Session })
}

// SessionOwnedBy: one of others, riding session, is owned (made by
// volumed), so a volume joining the session owns it too.
func SessionOwnedBy(others []record.Attachment, session string) bool {
	return session != "" && slices.ContainsFunc(others, func(o record.Attachment) bool { return o.Session == session && o.Owned })
}

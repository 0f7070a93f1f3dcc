package decide

import (
	"slices"

	"github.com/volumed/volumed/store/record"
)

// Claim is what is known of an attachment as volumed records it for a
// volume, at its attach or when start-up finds it in the kernel.
type Claim struct {
	// Made: volumed made the kernel object: it carries volumed's marker
	// (a loop device's tag), or this attach made it (a new session). The
	// adapters report it (Found.Owned); they decide nothing else.
	Made bool
	// Reusable: found in place and usable as it is (a session another
	// tool or the firmware made, a disk).
	Reusable bool
	// Pinned: the host booted from it.
	Pinned bool
	// Session is the shared kernel object it rides ("" if none), and
	// SessionMade says volumed made that session, for whichever volume
	// (known at once, before any record says so).
	Session     string
	SessionMade bool
	// AttachInterrupted: a crash caught volumed attaching this volume
	// (an attach intent was left). A session carries no marker of ours,
	// so one found then is taken as ours, else it would leak.
	AttachInterrupted bool
}

// Owns is the one rule for who owns an attachment, that is, who may tear
// it down: volumed, when it made it, when it rides a session volumed
// made (the last volume on it logs it out, whichever made it), or when
// a crash caught volumed attaching it; never what the host booted from.
// others are the attachments other volumes hold through the same driver.
func Owns(c Claim, others []record.Attachment) bool {
	if c.Pinned {
		return false
	}
	return c.Made || c.SessionMade || sessionOwnedBy(others, c.Session) || c.Reusable && c.AttachInterrupted
}

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

// sessionOwnedBy: one of others, riding session, is owned (made by
// volumed), so a volume joining the session owns it too.
func sessionOwnedBy(others []record.Attachment, session string) bool {
	return session != "" && slices.ContainsFunc(others, func(o record.Attachment) bool { return o.Session == session && o.Owned })
}

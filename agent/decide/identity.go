package decide

import (
	"strings"

	"github.com/volumed/volumed/store/record"
)

// IdentityPart is which of a volume's identities a check is about.
type IdentityPart int

func (p IdentityPart) String() string {
	if p == PartLUKS {
		return "LUKS2 header"
	}
	return "filesystem"
}

func (p IdentityPart) Of(id record.Identity) string {
	if p == PartLUKS {
		return id.LUKS
	}
	return id.Filesystem
}

func (p IdentityPart) Set(id *record.Identity, uuid string) {
	if p == PartLUKS {
		id.LUKS = uuid
	} else {
		id.Filesystem = uuid
	}
}

// IdentityVerdict is what to make of the UUID seen on a device.
type IdentityVerdict int

// Identity is the one rule: known is the volume's recorded
// identity (nil when none), source the attachment key the device was
// found for, seen the UUID read on it ("" when none could be read) and
// blank whether the device holds nothing at all (it would be formatted).
func Identity(known *record.Identity, source string, part IdentityPart, seen string, blank bool) IdentityVerdict {
	recorded := RecordedFor(known, source, part)
	switch {
	case blank && recorded != "":
		return IdentityChanged
	case blank, seen == "":
		return IdentityUnknown
	case recorded == "":
		return IdentityLearn
	case strings.EqualFold(recorded, seen):
		return IdentityMatches
	}
	return IdentityChanged
}

// RecordedFor is the UUID known records for part of source, "" if none.
func RecordedFor(known *record.Identity, source string, part IdentityPart) string {
	if known == nil || known.Source != source {
		return ""
	}
	return part.Of(*known)
}

// How an identity was learnt (record.Identity.How).
const (
	HowFormatted = "formatted" // volumed wrote it
	HowAdopted   = "adopted"   // found on the device
)

const (
	PartFilesystem IdentityPart = iota
	PartLUKS
)

const (
	// IdentityMatches: the volume's own.
	IdentityMatches IdentityVerdict = iota
	// IdentityLearn: nothing recorded for this source (a new volume, a
	// state written by a volumed that kept none, an edited source): what
	// is there is the volume's from now on.
	IdentityLearn
	// IdentityUnknown: nothing to compare (no UUID read, or a blank device
	// of a volume with nothing recorded): go on, record nothing.
	IdentityUnknown
	// IdentityChanged: another filesystem or header than the volume's, or
	// none where the volume had one: refused.
	IdentityChanged
)

func (p IdentityPart) Reason() string {
	if p == PartLUKS {
		return "LUKSHeaderChanged"
	}
	return "FilesystemChanged"
}

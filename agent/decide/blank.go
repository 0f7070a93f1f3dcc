package decide

import (
	"strings"

	"github.com/volumed/volumed/store/record"
)

// BlankByRecord is the one rule for a device blank by volumed's records
// rather than by its bytes: a source volumed created (a new sparse
// image) that nothing has formatted or mounted since, or the dm-crypt
// mapping of a LUKS2 header volumed wrote with no filesystem recorded
// on it, which decrypts the zeros the blank rule passed into noise. The
// mapping's rule rides the identity record, which outlives a reboot;
// the attachment's Created does not: the next boot attaches the image
// again, found, not created.
func BlankByRecord(rec *record.Volume, id *record.Identity, source string) bool {
	if rec == nil || rec.Attachment == nil {
		return false
	}
	if rec.Mapping == nil {
		return rec.Attachment.Created
	}
	return id != nil && id.Source == source && id.How == HowFormatted &&
		id.Filesystem == "" && id.LUKS != "" && strings.EqualFold(id.LUKS, rec.Mapping.UUID)
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/volumed/volumed/internal/blank"
	"github.com/volumed/volumed/store"
)

// checkBlank applies the blank rule (internal/blank) to dev right
// before volumed would write a filesystem or a LUKS header there: a
// device that is not provably blank keeps a NotBlank condition saying
// what was found and is left untouched. created is the attachment's
// record that volumed made the source itself.
func (a *Agent) checkBlank(ctx context.Context, name, dev string, created bool) error {
	facts, err := a.cfg.FS.Examine(ctx, dev, created)
	if err != nil {
		return fmt.Errorf("examine %s before writing to it: %w", dev, err)
	}
	v := blank.Decide(facts)
	if v.Blank {
		a.conds.Clear(name, CondNotBlank)
		return nil
	}
	a.conds.Set(name, CondNotBlank, v.Reason, v.Message)
	return errors.New(v.Message)
}

// createdSource: the volume's records say volumed made what its block
// device holds and nothing has written there since (blankByRecord).
func (a *Agent) createdSource(d *Desired) bool {
	return blankByRecord(a.state.Get(d.Name), a.idents.get(d.Name), d.Caps.Key)
}

// blankByRecord is the one rule for a device blank by volumed's records
// rather than by its bytes: a source volumed created (a new sparse
// image) that nothing has formatted or mounted since, or the dm-crypt
// mapping of a LUKS2 header volumed wrote with no filesystem recorded
// on it, which decrypts the zeros the blank rule passed into noise. The
// mapping's rule rides the identity record, which outlives a reboot;
// the attachment's Created does not: the next boot attaches the image
// again, found, not created.
func blankByRecord(rec *store.Volume, id *store.Identity, source string) bool {
	if rec == nil || rec.Attachment == nil {
		return false
	}
	if rec.Mapping == nil {
		return rec.Attachment.Created
	}
	return id != nil && id.Source == source && id.How == howFormatted &&
		id.Filesystem == "" && id.LUKS != "" && strings.EqualFold(id.LUKS, rec.Mapping.UUID)
}

// ownWrites: whatever is on the volume's device is volumed's own, by its
// records: blank by record (blankByRecord), or a format of its own a
// crash interrupted before it wrote a signature (that format began only
// on a device the blank rule passed, so its partial writes are the only
// data there).
func (a *Agent) ownWrites(d *Desired) bool {
	_, interrupted := a.formats.interrupted.of(d.Name)
	return interrupted || a.createdSource(d)
}

package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/volumed/volumed/internal/blank"
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

// createdSource: the volume's attachment record says volumed created
// its source and nothing has formatted or mounted it since.
func (a *Agent) createdSource(name string) bool {
	rec := a.state.Get(name)
	return rec != nil && rec.Attachment != nil && rec.Attachment.Created
}

// ownWrites: whatever is on the volume's device is volumed's own, by its
// records: a source it created, or a format of its own a crash
// interrupted before it wrote a signature (that format began only on a
// device the blank rule passed, so its partial writes are the only data
// there).
func (a *Agent) ownWrites(name string) bool {
	_, interrupted := a.formats.interrupted.of(name)
	return interrupted || a.createdSource(name)
}

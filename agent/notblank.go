package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/volumed/volumed/agent/decide"
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

// createdSource: the volume's records say volumed made what its block
// device holds and nothing has written there since (decide.BlankByRecord).
func (a *Agent) createdSource(d *Desired) bool {
	return decide.BlankByRecord(a.state.Get(d.Name), a.idents.get(d.Name), d.Caps.Key)
}

// ownWrites: whatever is on the volume's device is volumed's own, by its
// records: blank by record (decide.BlankByRecord), or a format of its own a
// crash interrupted before it wrote a signature (that format began only
// on a device the blank rule passed, so its partial writes are the only
// data there).
func (a *Agent) ownWrites(d *Desired) bool {
	_, interrupted := a.formats.interrupted.of(d.Name)
	return interrupted || a.createdSource(d)
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// refusedFormat: a mkfs failed and left signatures behind, for this
// generation of the volume's manifest.
type refusedFormat struct {
	generation string
	err        error
}

// formatFailed handles a mkfs that failed (it did not crash): when it
// left something on the device, what is there now is no longer blank,
// and neither formatting over it nor wiping it is volumed's call. The
// operator is told what is there and what to do, and the volume is not
// tried again until its manifest changes: each try would only fail the
// same way.
func (a *Agent) formatFailed(ctx context.Context, d *Desired, dev string, mkfsErr error) error {
	sigs, err := a.cfg.FS.Probe(ctx, dev)
	if err != nil || len(sigs) == 0 {
		return mkfsErr // still blank (or unknown): an ordinary failure, retried
	}
	refused := fmt.Errorf("%w; it left signatures on %s: %s; volumed does not format over it, mount it or wipe it, and will not try again until the manifest changes; if nothing on %s is wanted, remove the manifest (the volume lets the device go), run `volumed wipe --volume %s --yes` (for a loop image: delete the image file), then put the manifest back",
		mkfsErr, dev, describeSignatures(sigs), dev, d.Name)
	a.formats.refuse(d.Name, refusedFormat{generation: d.Generation, err: refused})
	a.conds.Set(d.Name, CondFormatRefused, "FormatFailed", refused.Error())
	return permanent(refused)
}

// formatRefusedFor returns the refusal of a failed format while the
// manifest is the one it was made for; a changed manifest clears it.
func (a *Agent) formatRefusedFor(d *Desired) error {
	r, ok := a.formats.refusedFor(d.Name, d.Generation)
	switch {
	case !ok:
		return nil
	case r.generation != d.Generation:
		a.conds.Clear(d.Name, CondFormatRefused)
		return nil
	}
	return permanent(r.err)
}

func describeSignatures(sigs []Signature) string {
	parts := make([]string, len(sigs))
	for i, s := range sigs {
		parts[i] = fmt.Sprintf("%s (%s, at byte %d)", s.Type, s.Usage, s.Offset)
	}
	return strings.Join(parts, ", ")
}

// permanentError is a failure that retrying cannot mend; the executor
// does not retry it until the volume's manifest changes.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return permanentError{err} }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

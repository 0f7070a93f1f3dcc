// The teardown operations (unmount_device, detach) and what a consumer
// that blocks them is told: a step refused as busy raises
// TeardownBlocked naming the holders.

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/internal/holders"
	"github.com/volumed/volumed/store"
)

// busyWait bounds how long an unmount waits for a busy mount to be let
// go: the mount driver would wait forever, and a holder that never
// leaves must show as a failure (a condition naming it, retries), not as
// a volume stuck "Unmounting". Detaches are not bounded here: a network
// logout may rightly take longer, and each attacher bounds its own.
const busyWait = 5 * time.Second

// teardownStep runs one unmount or detach, waiting at most wait (0: as
// long as the step does) for a holder to let go; a refusal as busy
// raises TeardownBlocked naming the holders of path, and success clears it.
func (a *Agent) teardownStep(ctx context.Context, name, what, path string, wait time.Duration, step func(context.Context) error) error {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	err := step(ctx)
	switch {
	case err == nil:
		a.apply(name, CondTeardownBlocked, nil, nil)
	case errors.Is(err, ErrBusy):
		a.apply(name, CondTeardownBlocked, busyProblem(what, path, err), nil)
	}
	return err
}

func busyProblem(what, path string, err error) *Problem {
	hs, herr := holders.Find("/proc", path)
	held := "held by " + holders.Describe(hs)
	switch {
	case herr != nil:
		held = "the holders could not be listed: " + herr.Error()
	case len(hs) == 0:
		held = "no process holds it through a path (look for mounts inside it, or users in other mount namespaces or in the kernel)"
	}
	return &Problem{Reason: "Busy", Message: fmt.Sprintf(
		"%s of %s refused: %v; %s; stop them or move them out, and volumed retries", what, path, err, held)}
}

func (a *Agent) unmount(ctx context.Context, name, path string) error {
	unmount := func(ctx context.Context) error { return a.cfg.Mounter.Unmount(ctx, path) }
	return a.teardownStep(ctx, name, "unmount", path, busyWait, unmount)
}

func (a *Agent) opUnmountDevice(ctx context.Context, name, kind string) error {
	// staging/<volume> names itself: no intent.
	return a.state.DoNamed(name, kind, OpUnmountDevice, func(rec *store.Volume) error {
		if rec.Staging == nil {
			return nil
		}
		p := rec.Staging.Path
		if sp, err := a.cfg.Mounter.At(p); err == nil && sp.Root {
			if sp.MountID != rec.Staging.MountID {
				top, err := a.mountInfoAt(p)
				if err != nil {
					return err
				}
				if top == nil || !sameDevice(top, rec.Staging.Device) {
					return fmt.Errorf("something else%s is mounted on top of %s; left alone", a.describeMount(p), p)
				}
			}
			if err := a.unmount(ctx, name, p); err != nil {
				return err
			}
		}
		// The empty staging dir stays until the next start
		// (sweepStaging): its rmdir waited on the state filesystem's
		// journal, as long as the unmount, with the slot held.
		rec.Staging = nil
		return nil
	})
}

func (a *Agent) opDetach(ctx context.Context, name, kind string) error {
	do := func(act func(rec *store.Volume) error) error { return a.state.Do(name, kind, OpDetach, nil, act) }
	if _, ok := a.cfg.Attachers[kind].(SelfNamedDetacher); ok {
		do = func(act func(rec *store.Volume) error) error { return a.state.DoNamed(name, kind, OpDetach, act) }
	}
	return do(func(rec *store.Volume) error {
		if rec.Attachment == nil {
			return nil
		}
		at := *rec.Attachment
		key := sessionKey(at.Kind, at.Session)
		// Observed here, under the volume's intent, not at planning: a
		// volume that joined the session since the pass began keeps it.
		sharers := a.sharers(name, at.Kind)
		if decide.MayRelease(at, sharers, a.sessions.has(key)) {
			att, err := a.attacher(at.Kind)
			if err != nil {
				return err
			}
			at.Owned = true
			detach := func(ctx context.Context) error { return att.Detach(ctx, at) }
			if err := a.teardownStep(ctx, name, "detach", at.Device, 0, detach); err != nil {
				return err
			}
			if key != "" {
				a.sessions.drop(key)
			}
		}
		rec.Attachment = nil
		return nil
	})
}

// The remount operation: changed mount options applied in place to the
// staging mount or a target (decide.Plan asks for it).

package agent

import (
	"errors"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// opRemount applies what decide.Plan found to remount, under an intent like every
// change to the kernel.
func (a *Agent) opRemount(d *Desired, t DesiredTarget) error {
	what := t.Path
	if what == "" {
		what = "staging"
	}
	return a.state.Do(d.Name, d.Kind, OpRemount, map[string]string{"target": what}, func(rec *store.Volume) error {
		if t.Path == "" {
			return a.remountStaging(d, rec)
		}
		return a.remountTarget(d, t, rec)
	})
}

func (a *Agent) remountStaging(d *Desired, rec *store.Volume) error {
	if rec.Staging == nil {
		return errRetryNow
	}
	st := *rec.Staging
	want := decide.StagingOptions(d)
	err := a.cfg.Mounter.Remount(st.Path, st.MountID, st.Options, want)
	switch {
	case err == nil:
		st.Options, st.Refused = want, nil
	case refusedLive(err):
		// Recorded, so that the same options are not tried on every pass
		// (nor after a restart); the PendingChange condition says so.
		st.Refused = &store.Refusal{Options: want, Error: err.Error()}
		a.cfg.Log.Warn("the filesystem refused a live remount; the change waits for the next mount", "volume", d.Name, "options", want, "error", err)
	}
	rec.Staging = &st
	return err
}

// refusedLive: the filesystem will not make this change while mounted;
// EBUSY (files open for writing when going read-only) may pass, so it is
// retried like any failure.
func refusedLive(err error) bool {
	return !errors.Is(err, unix.EBUSY) && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) ||
		errors.Is(err, unix.EROFS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EACCES))
}

func (a *Agent) remountTarget(d *Desired, t DesiredTarget, rec *store.Volume) error {
	i := slices.IndexFunc(rec.Targets, func(m store.MountRecord) bool { return m.Path == t.Path })
	if i < 0 {
		return errRetryNow
	}
	o := decide.BindOptionsFor(d, t)
	if err := a.cfg.Mounter.SetBindOptions(t.Path, rec.Targets[i].MountID, o); err != nil {
		return err
	}
	m := rec.Targets[i]
	m.ReadOnly, m.Options, m.Refused = t.ReadOnly, decide.BindWords(o), nil
	rec.Targets[i] = m
	return nil
}

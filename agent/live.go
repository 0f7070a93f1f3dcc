package agent

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/store"
)

// bindWords spells a target's flags out, each either way, so that the
// record is never empty and reads like mountinfo.
func bindWords(o BindOptions) []string {
	return []string{
		flagWord(o.ReadOnly, "ro", "rw"),
		flagWord(o.NoSuid, "nosuid", "suid"),
		flagWord(o.NoDev, "nodev", "dev"),
		flagWord(o.NoExec, "noexec", "exec"),
	}
}

// remountOp finds a mount of a converged volume whose options the
// manifest changed. A mount whose options are not known (adopted from
// the kernel, or recorded before they were kept) is remounted once to
// what the manifest says, which changes nothing if it already is so:
// an edit is never silently left out. Options a remount was refused are
// not tried again until the manifest asks for others.
func remountOp(name string, d *Desired, a *store.Volume) (Op, bool) {
	if a.Staging != nil && d.Spec.Filesystem != nil && wantsRemount(*a.Staging, stagingOptions(d)) {
		return Op{Volume: name, Kind: OpRemount}, true
	}
	for _, t := range a.Targets {
		want, ok := d.Target(t.Path)
		if !ok || want.SubPath != t.SubPath {
			continue
		}
		if want.ReadOnly != t.ReadOnly || wantsRemount(t, bindWords(bindOptions(d, want))) {
			return Op{Volume: name, Kind: OpRemount, Target: want}, true
		}
	}
	return Op{}, false
}

func wantsRemount(m store.MountRecord, want []string) bool {
	if slices.Equal(m.Options, want) {
		return false
	}
	return m.Refused == nil || !slices.Equal(m.Refused.Options, want)
}

// opRemount applies what remountOp found, under an intent like every
// change to the kernel.
func (a *Agent) opRemount(d *Desired, t DesiredTarget) error {
	what := t.Path
	if what == "" {
		what = "staging"
	}
	return a.state.Do(d.Name, d.Driver, OpRemount, map[string]string{"target": what}, func(rec *store.Volume) error {
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
	want := stagingOptions(d)
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
	o := bindOptions(d, t)
	if err := a.cfg.Mounter.SetBindOptions(t.Path, rec.Targets[i].MountID, o); err != nil {
		return err
	}
	m := rec.Targets[i]
	m.ReadOnly, m.Options, m.Refused = t.ReadOnly, bindWords(o), nil
	rec.Targets[i] = m
	return nil
}

// encryptionChanges: spec.encryption added to or removed from a volume in
// use (its filesystem mounted, or a raw block volume published) is never
// applied under its consumer.
func encryptionChanges(d *Desired, rec *store.Volume) []pending {
	content := ""
	switch {
	case rec.Staging != nil:
		content = "the volume's " + cmp.Or(rec.Staging.FSType, "filesystem")
	case d.Block && len(rec.Targets) > 0:
		content = "the volume's raw block data (published at " + rec.Targets[0].Path + ")"
	default:
		return nil
	}
	switch {
	case d.Encrypted() && rec.Mapping == nil:
		return []pending{{"EncryptionAdded", fmt.Sprintf(
			"encryption not applied: %s is on its device unencrypted, and volumed only ever encrypts a blank device; to encrypt it, take the volume down (state: absent), move the data off and wipe the device yourself, then set state: present",
			content)}}
	case !d.Encrypted() && rec.Mapping != nil:
		return []pending{{"EncryptionRemoved", fmt.Sprintf(
			"removing spec.encryption is not applied: %s lives inside LUKS2 volume %s (open as %s), which volumed never removes; put spec.encryption back, or the volume cannot be opened at its next use",
			content, rec.Mapping.UUID, rec.Mapping.Device)}}
	}
	return nil
}

// pending is a manifest change that is not in effect, and how to get it.
type pending struct{ reason, message string }

// pendingChanges compares what the manifest wants with what was recorded
// of the mounted volume and lists what cannot be applied live. It is
// pure, like Plan, so the condition follows the manifest and the record
// and clears itself when either changes.
func pendingChanges(d *Desired, rec *store.Volume) []pending {
	if !d.Wanted() || rec == nil {
		return nil
	}
	var out []pending
	if at := rec.Attachment; at != nil && at.Source != "" {
		if now := d.Caps.Key; now != at.Source {
			out = append(out, pending{"SourceChanged", fmt.Sprintf(
				"source (now %s) not applied: %s is still attached as %s; to switch, set state: absent, then present again (or reboot)",
				now, at.Source, at.Device)})
		}
	}
	out = append(out, encryptionChanges(d, rec)...)
	st, fs := rec.Staging, d.Spec.Filesystem
	if st == nil || fs == nil {
		return out
	}
	if st.FSType != "" && !compatibleFS(st.FSType, fs.Type) {
		out = append(out, pending{"FilesystemTypeChanged", fmt.Sprintf(
			"filesystem.type %s not applied: the volume holds %s, and volumed never formats over a filesystem; to change it, take the volume down (state: absent), move the data off and wipe the device yourself, then set state: present",
			fs.Type, st.FSType)})
	}
	if r := st.Refused; r != nil && slices.Equal(r.Options, stagingOptions(d)) {
		out = append(out, pending{"RemountRefused", fmt.Sprintf(
			"mount options %s not applied: %s refused a live remount (%s); volumed applies them at the next mount: set state: absent, then present again (or reboot)",
			optionChange(st.Options, r.Options), st.FSType, r.Error)})
	}
	return out
}

// optionChange says which options an edit adds and removes.
func optionChange(from, to []string) string {
	var added, removed []string
	for _, o := range to {
		if !slices.Contains(from, o) {
			added = append(added, o)
		}
	}
	for _, o := range from {
		if !slices.Contains(to, o) {
			removed = append(removed, o)
		}
	}
	var parts []string
	if len(added) > 0 {
		parts = append(parts, "+["+strings.Join(added, " ")+"]")
	}
	if len(removed) > 0 {
		parts = append(parts, "-["+strings.Join(removed, " ")+"]")
	}
	if len(parts) == 0 {
		return "[" + strings.Join(to, " ") + "]"
	}
	return strings.Join(parts, " ")
}

// updatePending raises or clears each volume's PendingChange condition
// from the manifests and the records.
func (a *Agent) updatePending(desired map[string]*Desired, actual map[string]*store.Volume) {
	for name := range actual {
		if desired[name] == nil {
			a.conds.Clear(name, CondPendingChange) // being torn down: nothing is pending
		}
	}
	for name, d := range desired {
		p := pendingChanges(d, actual[name])
		if len(p) == 0 {
			a.conds.Clear(name, CondPendingChange)
			continue
		}
		msgs := make([]string, len(p))
		for i, c := range p {
			msgs[i] = c.message
		}
		a.conds.Set(name, CondPendingChange, p[0].reason, strings.Join(msgs, "; "))
	}
}

package decide

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/volumed/volumed/store/record"
)

// EncryptionChange is the one rule for spec.encryption against what the
// volume holds: an encrypted volume with no mapping is opened (open,
// writing a LUKS2 header if the device is blank) only while nothing uses
// it, before its mount or a raw block volume's first bind; encryption
// added to or removed from a volume in use (its filesystem mounted, or
// published) is never applied under its consumer but pending, saying
// how to get it.
func EncryptionChange(d *Desired, rec *record.Volume) (open bool, pending []Pending) {
	content := inUse(d, rec)
	switch {
	case d.Encrypted() && rec.Mapping == nil && content == "":
		return true, nil
	case content == "":
		return false, nil
	case d.Encrypted() && rec.Mapping == nil:
		return false, []Pending{{"EncryptionAdded", fmt.Sprintf(
			"encryption not applied: %s is on its device unencrypted, and volumed only ever encrypts a blank device; to encrypt it, take the volume down (state: absent), move the data off and wipe the device yourself, then set state: present",
			content)}}
	case !d.Encrypted() && rec.Mapping != nil:
		return false, []Pending{{"EncryptionRemoved", fmt.Sprintf(
			"removing spec.encryption is not applied: %s lives inside LUKS2 volume %s (open as %s), which volumed never removes; put spec.encryption back, or the volume cannot be opened at its next use",
			content, rec.Mapping.UUID, rec.Mapping.Device)}}
	}
	return false, nil
}

// inUse names what a consumer uses of the volume ("" when nothing): its
// mounted filesystem, or its data published at a target.
func inUse(d *Desired, rec *record.Volume) string {
	switch {
	case rec.Staging != nil:
		return "the volume's " + cmp.Or(rec.Staging.FSType, "filesystem")
	case len(rec.Targets) == 0:
		return ""
	case d.Block:
		return "the volume's raw block data (published at " + rec.Targets[0].Path + ")"
	}
	return "the volume's data (published at " + rec.Targets[0].Path + ")"
}

// Pending is a manifest change that is not in effect, and how to get it.
type Pending struct{ Reason, Message string }

// PendingChanges compares what the manifest wants with what was recorded
// of the mounted volume and lists what cannot be applied live. It is
// pure, like Plan, so the condition follows the manifest and the record
// and clears itself when either changes.
func PendingChanges(d *Desired, rec *record.Volume) []Pending {
	if !d.Wanted() || rec == nil {
		return nil
	}
	var out []Pending
	if at := rec.Attachment; at != nil && at.Source != "" {
		if now := d.Caps.Key; now != at.Source {
			out = append(out, Pending{"SourceChanged", fmt.Sprintf(
				"source (now %s) not applied: %s is still attached as %s; to switch, set state: absent, then present again (or reboot)",
				now, at.Source, at.Device)})
		}
	}
	_, enc := EncryptionChange(d, rec)
	out = append(out, enc...)
	st, fs := rec.Staging, d.Spec.Filesystem
	if st == nil || fs == nil {
		return out
	}
	if st.FSType != "" && !d.KeepsFS(st.FSType) {
		out = append(out, Pending{"FilesystemTypeChanged", fmt.Sprintf(
			"filesystem.type %s not applied: the volume holds %s, and volumed never formats over a filesystem; to change it, take the volume down (state: absent), move the data off and wipe the device yourself, then set state: present",
			fs.Type, st.FSType)})
	}
	if r := st.Refused; r != nil && slices.Equal(r.Options, StagingOptions(d)) {
		out = append(out, Pending{"RemountRefused", fmt.Sprintf(
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

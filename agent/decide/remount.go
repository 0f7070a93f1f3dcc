package decide

import (
	"slices"

	"github.com/volumed/volumed/store/record"
)

// BindWords spells a target's flags out, each either way, so that the
// record is never empty and reads like mountinfo.
func BindWords(o BindOptions) []string {
	return []string{
		FlagWord(o.ReadOnly, "ro", "rw"),
		FlagWord(o.NoSuid, "nosuid", "suid"),
		FlagWord(o.NoDev, "nodev", "dev"),
		FlagWord(o.NoExec, "noexec", "exec"),
	}
}

// remountOp finds a mount of a converged volume whose options the
// manifest changed. A mount whose options are not known (adopted from
// the kernel, or recorded before they were kept) is remounted once to
// what the manifest says, which changes nothing if it already is so:
// an edit is never silently left out. Options a remount was refused are
// not tried again until the manifest asks for others.
func remountOp(name string, d *Desired, a *record.Volume) (Op, bool) {
	if a.Staging != nil && d.Spec.Filesystem != nil && wantsRemount(*a.Staging, StagingOptions(d)) {
		return Op{Volume: name, Name: OpRemount}, true
	}
	for _, t := range a.Targets {
		want, ok := d.Target(t.Path)
		if !ok || want.SubPath != t.SubPath {
			continue
		}
		if want.ReadOnly != t.ReadOnly || wantsRemount(t, BindWords(BindOptionsFor(d, want))) {
			return Op{Volume: name, Name: OpRemount, Target: want}, true
		}
	}
	return Op{}, false
}

func wantsRemount(m record.MountRecord, want []string) bool {
	if slices.Equal(m.Options, want) {
		return false
	}
	return m.Refused == nil || !slices.Equal(m.Refused.Options, want)
}

func ReadOnlySource(d *Desired) bool {
	return d.Caps.ReadOnly
}

// StagingOptions are the options of the staging mount. suid and dev are
// spelled out when allowed: the list is then never empty, so a record
// of it can be told from one that predates recording (nil).
func StagingOptions(d *Desired) []string {
	fs := d.Spec.Filesystem
	opts := slices.Clone(fs.MountOptions)
	opts = append(opts, FlagWord(!fs.AllowSuid, "nosuid", "suid"), FlagWord(!fs.AllowDev, "nodev", "dev"))
	if ReadOnlySource(d) {
		opts = append(opts, "ro")
	}
	return opts
}

func FlagWord(on bool, yes, no string) string {
	if on {
		return yes
	}
	return no
}

// BindOptionsFor: nosuid and nodev unless the manifest allows them; a
// volume without a filesystem block (directory, tmpfs) gets the defaults.
func BindOptionsFor(d *Desired, t DesiredTarget) BindOptions {
	o := BindOptions{ReadOnly: t.ReadOnly || ReadOnlySource(d), NoSuid: true, NoDev: !t.Block}
	if fs := d.Spec.Filesystem; fs != nil {
		o.NoSuid, o.NoDev = !fs.AllowSuid, !fs.AllowDev
		o.NoExec = slices.Contains(fs.MountOptions, "noexec")
	}
	return o
}

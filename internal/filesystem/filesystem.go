// Package filesystem is the one place that knows the filesystems volumed
// formats: per type, its mkfs program and flags, its grow and read-only
// check tools, the package that gives them, its minimum size and the
// traits the agent reads. The manifest check, the JSON Schema, the mkfs
// and grow of drivers/blockfs and the host check all read it.
//
// Adding a filesystem is one entry in All; then `make schema`, and the
// registry's test mkfs-es the new type at its minimum size.
package filesystem

import (
	"slices"
	"strings"
)

// Default is the type a volume gets where one is not said (a CSI volume
// without an fsType).
const Default = "ext4"

// Type is what volumed knows of one filesystem.
type Type struct {
	// Name is spec.filesystem.type, the mount's fstype and blkid's TYPE.
	Name string
	// Also are the types blkid may report of a filesystem volumed takes
	// as this one: an ext2 or ext3 filesystem is mounted by ext4 and
	// kept when ext4 is wanted.
	Also []string
	// Package is the (Debian) package that gives its programs.
	Package string
	Mkfs    Mkfs
	Grow    Grow
	Check   Check
	// MinSize is the smallest device its mkfs formats with volumed's
	// flags (the tools refuse less: mkfs.xfs "must be larger than
	// 300MB", mkfs.btrfs "minimum size for each btrfs device").
	MinSize int64
	// ErrorCounters: the kernel counts the errors it met on the mounted
	// filesystem in /sys/fs/<Name>/<device>/errors_count (ext4's).
	ErrorCounters bool
	// MountRecord: the superblock keeps a mount count and time (ext2/3/4
	// at byte 1024), so a filesystem never mounted can be told apart.
	MountRecord bool
}

// Mkfs is how a filesystem is made.
type Mkfs struct {
	Program string
	// Args are always given: quiet, and for mkfs.ext4 -F, which is not
	// a force over a signature but keeps it from asking on a terminal
	// when it is given a whole disk.
	Args []string
	// UUID are the arguments that set the new filesystem's UUID, with
	// "%s" where the UUID goes.
	UUID []string
	// Force is the flag that formats over an existing signature ("" when
	// Args already carry it); only a half-made filesystem of volumed's
	// own is ever formatted over.
	Force string
	// Label is the flag that sets a label.
	Label string
}

// Grow is how a mounted filesystem is grown to fill its device.
type Grow struct {
	Program string
	Args    []string
	// AtMountpoint: the tool takes the mount point, not the device.
	AtMountpoint bool
}

// Check is how the filesystem's own checker runs without writing.
type Check struct {
	Program string
	Args    []string // the device follows
	// Damaged reads the checker's exit status: it found damage (not a
	// dirty log, not an operational error).
	Damaged func(code int) bool
}

// All lists the filesystems, in the order messages and the schema name
// them.
func All() []Type {
	return []Type{
		{
			Name: "ext4", Also: []string{"ext2", "ext3"}, Package: "e2fsprogs",
			Mkfs:  Mkfs{Program: "mkfs.ext4", Args: []string{"-q", "-F"}, UUID: []string{"-U", "%s"}, Label: "-L"},
			Grow:  Grow{Program: "resize2fs"},
			Check: Check{Program: "e2fsck", Args: []string{"-n", "-f"}, Damaged: func(code int) bool { return code&4 != 0 && code&8 == 0 }},
			// mke2fs 1.47's "floppy" defaults; less is refused.
			MinSize:       104 << 10,
			ErrorCounters: true, MountRecord: true,
		},
		{
			Name: "xfs", Package: "xfsprogs",
			Mkfs: Mkfs{Program: "mkfs.xfs", Args: []string{"-q"}, UUID: []string{"-m", "uuid=%s"}, Force: "-f", Label: "-L"},
			Grow: Grow{Program: "xfs_growfs", AtMountpoint: true},
			// 2 is a dirty log: a filesystem that was mounted, not a
			// broken one.
			Check:   Check{Program: "xfs_repair", Args: []string{"-n"}, Damaged: func(code int) bool { return code == 1 }},
			MinSize: 300 << 20,
		},
		{
			Name: "btrfs", Package: "btrfs-progs",
			Mkfs:    Mkfs{Program: "mkfs.btrfs", Args: []string{"-q"}, UUID: []string{"-U", "%s"}, Force: "-f", Label: "-L"},
			Grow:    Grow{Program: "btrfs", Args: []string{"filesystem", "resize", "max"}, AtMountpoint: true},
			Check:   Check{Program: "btrfs", Args: []string{"check", "--readonly"}, Damaged: func(code int) bool { return code == 1 }},
			MinSize: 109 << 20,
		},
	}
}

// Lookup returns the filesystem named name (a manifest's type).
func Lookup(name string) (Type, bool) {
	ts := All()
	i := slices.IndexFunc(ts, func(t Type) bool { return t.Name == name })
	if i < 0 {
		return Type{}, false
	}
	return ts[i], true
}

// Of returns the filesystem blkid's type found is taken as: its own, or
// the one that lists it in Also (ext3 is ext4's).
func Of(found string) (Type, bool) {
	for _, t := range All() {
		if t.Name == found || slices.Contains(t.Also, found) {
			return t, true
		}
	}
	return Type{}, false
}

// Compatible: a filesystem blkid reports as found is kept, not refused,
// where want is wanted.
func Compatible(found, want string) bool {
	t, ok := Of(found)
	return ok && t.Name == want
}

// Names lists the filesystems' names.
func Names() []string {
	var out []string
	for _, t := range All() {
		out = append(out, t.Name)
	}
	return out
}

// List names the filesystems for a message: "ext4, xfs or btrfs".
func List() string {
	n := Names()
	if len(n) == 1 {
		return n[0]
	}
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}

// Command is the mkfs command line that makes this filesystem on device:
// the fixed arguments, the UUID's (when uuid is not ""), the force flag
// (when force), then extra (a manifest's mkfsOptions), then the device.
func (m Mkfs) Command(device, uuid string, force bool, extra []string) []string {
	args := slices.Clone(m.Args)
	if uuid != "" {
		for _, a := range m.UUID {
			args = append(args, strings.ReplaceAll(a, "%s", uuid))
		}
	}
	if force && m.Force != "" {
		args = append(args, m.Force)
	}
	args = append(args, extra...)
	return append(args, device)
}

// Command is the grow tool's arguments for the filesystem on device
// mounted at mountpoint.
func (g Grow) Command(device, mountpoint string) []string {
	target := device
	if g.AtMountpoint {
		target = mountpoint
	}
	return append(slices.Clone(g.Args), target)
}

// Command is the checker's arguments for device.
func (c Check) Command(device string) []string {
	return append(slices.Clone(c.Args), device)
}

// Program is one program volumed runs on a filesystem, and what for.
type Program struct{ Name, Why string }

// Programs are the programs volumed runs on this filesystem (to make,
// grow and check it), each once, with what it does: what a host must
// have for a volume of this type.
func (t Type) Programs() []Program {
	var out []Program
	var verbs [][]string
	for _, r := range []struct{ prog, verb string }{
		{t.Mkfs.Program, "formats"}, {t.Grow.Program, "grows"}, {t.Check.Program, "checks"},
	} {
		if i := slices.IndexFunc(out, func(p Program) bool { return p.Name == r.prog }); i >= 0 {
			verbs[i] = append(verbs[i], r.verb)
			continue
		}
		out = append(out, Program{Name: r.prog})
		verbs = append(verbs, []string{r.verb})
	}
	for i := range out {
		what := t.Name + " filesystems"
		if verbs[i][0] == "formats" {
			what = t.Name + " volumes"
		}
		out[i].Why = strings.Join(verbs[i], " and ") + " " + what
	}
	return out
}

package mount

import (
	"strings"

	"golang.org/x/sys/unix"
)

// Options is the parsed form of mount options.
type Options struct {
	Flags uintptr // MS_* flags for mount(2)
	Data  string  // filesystem-specific options, comma-separated
	// Propagation holds MS_SHARED/MS_PRIVATE/MS_SLAVE/MS_UNBINDABLE (and
	// MS_REC). The kernel does not take these with the other flags, so
	// MountDeviceAt sets them with mount_setattr once the mount is made.
	Propagation uintptr
}

type flagOpt struct {
	set   bool // true: set the bits; false: clear them
	flags uintptr
}

var flagOpts = map[string]flagOpt{
	"ro":          {true, unix.MS_RDONLY},
	"rw":          {false, unix.MS_RDONLY},
	"nosuid":      {true, unix.MS_NOSUID},
	"suid":        {false, unix.MS_NOSUID},
	"nodev":       {true, unix.MS_NODEV},
	"dev":         {false, unix.MS_NODEV},
	"noexec":      {true, unix.MS_NOEXEC},
	"exec":        {false, unix.MS_NOEXEC},
	"sync":        {true, unix.MS_SYNCHRONOUS},
	"async":       {false, unix.MS_SYNCHRONOUS},
	"dirsync":     {true, unix.MS_DIRSYNC},
	"noatime":     {true, unix.MS_NOATIME},
	"atime":       {false, unix.MS_NOATIME},
	"nodiratime":  {true, unix.MS_NODIRATIME},
	"diratime":    {false, unix.MS_NODIRATIME},
	"relatime":    {true, unix.MS_RELATIME},
	"norelatime":  {false, unix.MS_RELATIME},
	"strictatime": {true, unix.MS_STRICTATIME},
	"lazytime":    {true, unix.MS_LAZYTIME},
	"nolazytime":  {false, unix.MS_LAZYTIME},
	"mand":        {true, unix.MS_MANDLOCK},
	"nomand":      {false, unix.MS_MANDLOCK},
	"silent":      {true, unix.MS_SILENT},
	"loud":        {false, unix.MS_SILENT},
	"bind":        {true, unix.MS_BIND},
	"rbind":       {true, unix.MS_BIND | unix.MS_REC},
	"remount":     {true, unix.MS_REMOUNT},
}

var propagationOpts = map[string]uintptr{
	"shared":      unix.MS_SHARED,
	"rshared":     unix.MS_SHARED | unix.MS_REC,
	"private":     unix.MS_PRIVATE,
	"rprivate":    unix.MS_PRIVATE | unix.MS_REC,
	"slave":       unix.MS_SLAVE,
	"rslave":      unix.MS_SLAVE | unix.MS_REC,
	"unbindable":  unix.MS_UNBINDABLE,
	"runbindable": unix.MS_UNBINDABLE | unix.MS_REC,
}

// userspaceOnly are fstab words that mount(8) consumes itself; handed to
// the kernel as data they make most filesystems refuse to mount.
var userspaceOnly = map[string]bool{
	"defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true,
	"users": true, "owner": true, "group": true, "nofail": true, "_netdev": true,
}

// ParseOptions turns fstab-style options into MS_* flags and the data
// string for filesystem-specific ones. An element may itself hold several
// comma-separated options; commas inside double quotes (SELinux contexts)
// do not split. Later options win over earlier ones, as with mount(8).
func ParseOptions(opts []string) Options {
	var o Options
	var data []string
	for _, elem := range opts {
		for _, opt := range splitOptions(elem) {
			opt = strings.TrimSpace(opt)
			if opt == "" || userspaceOnly[opt] || strings.HasPrefix(opt, "x-") || strings.HasPrefix(opt, "comment=") {
				continue
			}
			if f, ok := flagOpts[opt]; ok {
				if f.set {
					o.Flags |= f.flags
				} else {
					o.Flags &^= f.flags
				}
				continue
			}
			if p, ok := propagationOpts[opt]; ok {
				o.Propagation = p
				continue
			}
			data = append(data, opt)
		}
	}
	o.Data = strings.Join(data, ",")
	return o
}

func splitOptions(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

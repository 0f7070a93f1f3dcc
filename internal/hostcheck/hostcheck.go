// Package hostcheck says what a host lacks for the filesystems and source
// kinds a set of manifests uses: the programs the drivers run and the
// kernel features they need. Its inputs are plain names and the Needs each
// kind declares, so that whatever knows a manifest's needs (today
// `volumed validate`) can ask it.
//
// A manifest is often validated on a build host, not on the machine it is
// for, so what this package finds is a warning, never a refusal.
package hostcheck

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/filesystem"
)

// Host is the machine to check. The zero value is not useful; use Local.
type Host struct {
	// Root is where /proc, /dev and /lib/modules are read from ("/").
	Root string
	// Release is the running kernel's release (uname -r), which names the
	// directory of its modules.
	Release string
	// LookPath finds a program as the agent would run it.
	LookPath func(string) (string, error)
}

// Local is this machine.
func Local() Host {
	var u unix.Utsname
	release := ""
	if unix.Uname(&u) == nil {
		release = unix.ByteSliceToString(u.Release[:])
	}
	return Host{Root: "/", Release: release, LookPath: exec.LookPath}
}

// Lack is one thing the host lacks, with what gives it.
type Lack struct {
	What string // "mkfs.xfs", "the xfs filesystem", ...
	Why  string // "formats xfs volumes", ...
	Fix  string // "install xfsprogs", "load the xfs module", ...
}

func (l Lack) String() string {
	return fmt.Sprintf("this host lacks %s (%s; %s)", l.What, l.Why, l.Fix)
}

// Program is a program a driver runs, and the package that gives it.
type Program struct{ Name, Why, Package string }

// Module is a kernel feature a driver needs: there when the module is
// loaded or built in (/sys/module/NAME, or /dev/DEV when set) or can be
// loaded.
type Module struct {
	Name string // "nvme-tcp"
	What string // "NVMe/TCP", for messages
	Dev  string // "nvme-fabrics": the device the feature makes, if any
}

// Needs is what a source kind's driver asks of the host (kind.Kind's
// Needs says it per kind, so this package knows no kind by name).
type Needs struct {
	Programs []Program
	Modules  []Module
}

// Encryption is what an encrypted volume needs of the host: cryptsetup
// (which formats and opens LUKS2), dm-crypt in the kernel, and with a
// TPM2 key the kernel's TPM2 resource manager.
func (h Host) Encryption(tpm2 bool) []Lack {
	n := Needs{
		Programs: []Program{{"cryptsetup", "formats and opens encrypted volumes", "cryptsetup-bin"}},
		Modules:  []Module{{Name: "dm-crypt", What: "dm-crypt"}},
	}
	out := h.Lacks(n)
	if tpm2 && !h.exists("dev/tpmrm0") {
		out = append(out, Lack{What: "/dev/tpmrm0", Why: "a tpm2 key is sealed and unsealed by the TPM2 through its resource manager",
			Fix: "a TPM 2.0 (or a firmware TPM) enabled, with the kernel's tpm_tis or tpm_crb driver"})
	}
	return out
}

// Filesystem reports what the host lacks to format, mount, grow and
// check fstype: its programs (internal/filesystem's), and the filesystem
// in the kernel (built in, or a module that can be loaded).
func (h Host) Filesystem(fstype string) []Lack {
	var ps []Program
	if t, ok := filesystem.Lookup(fstype); ok {
		for _, p := range t.Programs() {
			ps = append(ps, Program{p.Name, p.Why, t.Package})
		}
	}
	out := h.programs(ps)
	if !h.kernelHasFilesystem(fstype) && !h.hasModule(fstype) {
		out = append(out, Lack{What: "the " + fstype + " filesystem in its kernel",
			Why: "not in /proc/filesystems, and no " + fstype + " module in " + h.modulesDir(),
			Fix: "use a kernel with " + fstype})
	}
	return out
}

// Lacks reports what of n the host lacks.
func (h Host) Lacks(n Needs) []Lack {
	out := h.programs(n.Programs)
	for _, m := range n.Modules {
		if (m.Dev != "" && h.exists("dev/"+m.Dev)) || h.exists("sys/module/"+strings.ReplaceAll(m.Name, "-", "_")) || h.hasModule(m.Name) {
			continue
		}
		why := "no " + m.Name + " module in " + h.modulesDir()
		if m.Dev != "" {
			why = "no /dev/" + m.Dev + " and " + why
		}
		out = append(out, Lack{What: m.What + " in its kernel", Why: why, Fix: "use a kernel with " + m.Name})
	}
	return out
}

func (h Host) programs(ps []Program) []Lack {
	var out []Lack
	for _, p := range ps {
		if _, err := h.LookPath(p.Name); err != nil {
			out = append(out, Lack{What: p.Name, Why: p.Why, Fix: "install " + p.Package})
		}
	}
	return out
}

func (h Host) path(rel string) string { return filepath.Join(h.Root, rel) }

func (h Host) exists(rel string) bool {
	_, err := os.Stat(h.path(rel))
	return err == nil
}

func (h Host) modulesDir() string { return filepath.Join("/lib/modules", h.Release) }

// kernelHasFilesystem reads /proc/filesystems: what is built in or loaded.
func (h Host) kernelHasFilesystem(fstype string) bool {
	f, err := os.Open(h.path("proc/filesystems"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && fields[len(fields)-1] == fstype {
			return true
		}
	}
	return false
}

// hasModule reports whether the running kernel's module tree holds name,
// compressed or not. The kernel treats - and _ in module names alike.
func (h Host) hasModule(name string) bool {
	if h.Release == "" {
		return false
	}
	want := strings.ReplaceAll(name, "-", "_")
	found := errors.New("found")
	err := filepath.WalkDir(h.path(h.modulesDir()), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		base := d.Name()
		i := strings.Index(base, ".ko")
		if i > 0 && strings.ReplaceAll(base[:i], "-", "_") == want {
			return found
		}
		return nil
	})
	return err == found
}

package testtool

import "slices"

// Where says who puts a tool on the machine that runs the suite.
type Where int

const (
	// Deps: scripts/deps.sh installs it (or it is part of every Debian).
	Deps Where = iota
	// Prerequisite: the README's own prerequisites (Go, make, a C
	// compiler for -race), which deps.sh does not install.
	Prerequisite
	// Guest: it runs only inside a VM or OS image, fetched from its
	// Debian package by the test that builds the image, never the host's.
	Guest
	// OnRequest: only a run someone asks for uses it (make bench
	// PROFILE=), which says which package to install; make test never
	// runs it, so deps.sh does not install it.
	OnRequest
)

// Tool is a program the suite runs (a test, or a driver under test), and
// the Debian package that gives it.
type Tool struct {
	Name    string
	Package string
	Where   Where
}

// Library is a shared library a tool loads at run time with dlopen,
// which no ELF dependency of the tool names, so no package dependency
// brings it either.
type Library struct {
	Soname  string // "libtss2-rc.so.0"
	Package string // its Debian package (bookworm)
	For     string // the tool that loads it
}

// Tools is every program the suite runs. registry_test.go scans the
// module (internal/testtool/toolscan) and fails on a program the code
// runs that this list lacks, and on an entry nothing runs; test/os's
// fresh-machine test checks that deps.sh brings every Deps entry to a
// minimal Debian.
func Tools() []Tool {
	return slices.Clone(tools)
}

// Libraries is every library a tool of Tools loads at run time.
func Libraries() []Library {
	return slices.Clone(libraries)
}

// Lookup returns the registry's entry for a program.
func Lookup(name string) (Tool, bool) {
	i := slices.IndexFunc(tools, func(t Tool) bool { return t.Name == name })
	if i < 0 {
		return Tool{}, false
	}
	return tools[i], true
}

// Read only: Tools and Libraries hand out copies.
var tools = []Tool{
	{"/bin/sh", "dash", Deps},
	{"sh", "dash", Deps},
	{"bash", "bash", Deps},
	{"chroot", "coreutils", Deps},
	{"cp", "coreutils", Deps},
	{"ls", "coreutils", Deps},
	{"mkdir", "coreutils", Deps},
	{"sync", "coreutils", Deps},
	{"sleep", "coreutils", Deps},
	{"apt-cache", "apt", Deps},
	{"apt-get", "apt", Deps},
	{"tar", "tar", Deps},
	{"dpkg", "dpkg", Deps},
	{"dpkg-deb", "dpkg", Deps},
	{"dpkg-query", "dpkg", Deps},
	{"ldd", "libc-bin", Deps},
	{"blkid", "util-linux", Deps},
	{"fsfreeze", "util-linux", Deps},
	{"mkswap", "util-linux", Deps},
	{"unshare", "util-linux", Deps},
	{"wipefs", "util-linux", Deps},
	{"partx", "util-linux", Deps},
	{"addpart", "util-linux", Deps},
	{"pvcreate", "lvm2", Deps},
	{"losetup", "mount", Deps},
	{"mount", "mount", Deps},
	{"umount", "mount", Deps},
	{"sfdisk", "fdisk", Deps},
	{"sgdisk", "gdisk", Deps},
	{"mkfs.vfat", "dosfstools", Deps},
	{"e2fsck", "e2fsprogs", Deps},
	{"mke2fs", "e2fsprogs", Deps},
	{"mkfs.ext4", "e2fsprogs", Deps},
	{"resize2fs", "e2fsprogs", Deps},
	{"debugfs", "e2fsprogs", Deps},
	{"mkfs.xfs", "xfsprogs", Deps},
	{"xfs_growfs", "xfsprogs", Deps},
	{"xfs_io", "xfsprogs", Deps},
	{"xfs_repair", "xfsprogs", Deps},
	{"btrfs", "btrfs-progs", Deps},
	{"mkfs.btrfs", "btrfs-progs", Deps},
	{"cryptsetup", "cryptsetup-bin", Deps},
	{"systemd-analyze", "systemd", Deps},
	{"systemd-cryptenroll", "systemd", Deps},
	{"systemd-tmpfiles", "systemd", Deps},
	{"journalctl", "systemd", Deps},
	{"swtpm", "swtpm", Deps},
	{"/usr/libexec/tangd", "tang-common", Deps},
	{"/usr/libexec/tangd-keygen", "tang-common", Deps},
	{"/usr/libexec/tangd-rotate-keys", "tang-common", Deps},
	{"clevis", "clevis-luks", Deps},
	{"clevis-encrypt-tpm2", "clevis-tpm2", Deps},
	{"tpm2_unseal", "tpm2-tools", Deps},
	{"prometheus", "prometheus", Deps},
	{"promtool", "prometheus", Deps},
	{"rpm", "rpm", Deps},
	{"groff", "groff-base", Deps},
	{"zsh", "zsh", Deps},
	{"python3", "python3", Deps},
	{"ip", "iproute2", Deps},
	{"depmod", "kmod", Deps},
	{"modprobe", "kmod", Deps},
	{"busybox", "busybox-static", Deps},
	{"qemu-system-x86_64", "qemu-system-x86", Deps},
	{"qemu-img", "qemu-utils", Deps},
	{"qemu-storage-daemon", "qemu-system-common", Deps},
	{"mmdebstrap", "mmdebstrap", Deps},
	{"go", "", Prerequisite},
	{"make", "make", Prerequisite},
	{"perf", "linux-perf", OnRequest},
	{"iscsiadm", "open-iscsi", Guest},
	{"lvm", "lvm2", Guest},
	{"thin_check", "thin-provisioning-tools", Guest},
}

// systemd 252 dlopens tpm2-tss (src/shared/tpm2-util.c: esys, rc, mu,
// and libtss2-tcti-DRIVER.so.0 for --tpm2-device=DRIVER:...); the tests
// enrol against swtpm. cryptsetup's pthread_cancel loads libgcc_s.
var libraries = []Library{
	{"libtss2-esys.so.0", "libtss2-esys-3.0.2-0", "systemd-cryptenroll"},
	{"libtss2-rc.so.0", "libtss2-rc0", "systemd-cryptenroll"},
	{"libtss2-mu.so.0", "libtss2-mu0", "systemd-cryptenroll"},
	{"libtss2-tcti-swtpm.so.0", "libtss2-tcti-swtpm0", "systemd-cryptenroll"},
	{"libgcc_s.so.1", "libgcc-s1", "cryptsetup"},
}

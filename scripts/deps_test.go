// Package scripts_test checks scripts/deps.sh against fake machines: an
// os-release, dpkg, apt-get and id of the test's making on a stripped PATH.
package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type machine struct {
	t         *testing.T
	dir, bin  string
	osRelease string
	lists     string
}

// newMachine has the given os-release ID, the given Debian packages
// installed (dpkg -s answers for them only), the given commands on PATH,
// and is root or not. apt-get writes its arguments to a log.
func newMachine(t *testing.T, id string, root bool, installed, commands []string) *machine {
	dir := t.TempDir()
	m := &machine{t: t, dir: dir, bin: filepath.Join(dir, "bin"), osRelease: filepath.Join(dir, "os-release"), lists: filepath.Join(dir, "lists")}
	for _, d := range []string{m.bin, m.lists} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m.file(m.osRelease, "ID="+id+"\n")
	uid := "1000"
	if root {
		uid = "0"
	}
	m.script("id", `echo `+uid)
	if id == "debian" || id == "ubuntu" {
		m.script("dpkg", `case " `+strings.Join(installed, " ")+` " in *" $2 "*) exit 0;; esac; exit 1`)
		m.script("apt-get", `echo "$*" >>`+filepath.Join(dir, "apt.log"))
	}
	for _, c := range commands {
		m.script(c, "true")
	}
	return m
}

func (m *machine) file(path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		m.t.Fatal(err)
	}
}

func (m *machine) script(name, body string) {
	m.file(filepath.Join(m.bin, name), "#!/bin/sh\n"+body+"\n")
}

func (m *machine) run(what string) (string, int) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		m.t.Fatal(err)
	}
	cmd := exec.Command(bash, "deps.sh", what)
	// sh for the fake programs, and nothing else of the real machine.
	sh := filepath.Join(m.dir, "sh")
	if err := os.Mkdir(sh, 0o755); err != nil && !os.IsExist(err) {
		m.t.Fatal(err)
	}
	if err := os.Symlink("/bin/sh", filepath.Join(sh, "sh")); err != nil && !os.IsExist(err) {
		m.t.Fatal(err)
	}
	cmd.Env = []string{"PATH=" + m.bin + ":" + sh, "VOLUMED_OS_RELEASE=" + m.osRelease, "VOLUMED_APT_LISTS=" + m.lists, "VOLUMED_SBIN="}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		m.t.Fatal(err)
	}
	return string(out), code
}

func (m *machine) aptLog() string {
	data, err := os.ReadFile(filepath.Join(m.dir, "apt.log"))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		m.t.Fatal(err)
	}
	return string(data)
}

var allTestPackages = []string{"e2fsprogs", "xfsprogs", "btrfs-progs", "mount", "dosfstools", "fdisk", "gdisk",
	"prometheus", "rpm", "systemd", "qemu-system-x86", "busybox-static", "kmod", "iproute2", "python3", "man-db", "zsh", "cryptsetup-bin",
	"swtpm", "swtpm-tools", "lvm2", "mmdebstrap", "qemu-utils", "qemu-system-common",
	"tang-common", "clevis-luks", "clevis-tpm2", "tpm2-tools"}

func without(list []string, drop ...string) []string {
	var out []string
	for _, p := range list {
		if !strings.Contains(" "+strings.Join(drop, " ")+" ", " "+p+" ") {
			out = append(out, p)
		}
	}
	return out
}

func TestDebianRootAllPresentIsQuiet(t *testing.T) {
	m := newMachine(t, "debian", true, allTestPackages, []string{"dpkg", "apt-get"})
	m.file(filepath.Join(m.lists, "deb.debian.org_dists_bookworm_main_binary-amd64_Packages.lz4"), "")
	for _, what := range []string{"test", "demo", "test"} {
		out, code := m.run(what)
		if code != 0 || out != "" {
			t.Fatalf("deps.sh %s with everything installed: exit %d, output %q; want exit 0 and no output", what, code, out)
		}
	}
	if log := m.aptLog(); log != "" {
		t.Fatalf("apt-get ran with everything installed: %q", log)
	}
}

func TestDebianRootInstallsSwtpm(t *testing.T) {
	m := newMachine(t, "debian", true, without(allTestPackages, "swtpm", "swtpm-tools"), nil)
	m.file(filepath.Join(m.lists, "x_Packages"), "")
	if out, code := m.run("test"); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := "update -qq\ninstall -y -qq --no-install-recommends swtpm swtpm-tools\n"
	if log := m.aptLog(); log != want {
		t.Fatalf("apt-get calls:\n%s\nwant:\n%s", log, want)
	}
	m2 := newMachine(t, "debian", true, without(allTestPackages, "swtpm", "swtpm-tools"), nil)
	if out, code := m2.run("demo"); code != 0 || m2.aptLog() != "" {
		t.Fatalf("deps.sh demo: exit %d %s, apt-get %q; the demo needs no TPM", code, out, m2.aptLog())
	}
}

func TestDebianRootInstallsOnlyWhatIsMissing(t *testing.T) {
	m := newMachine(t, "debian", true, without(allTestPackages, "xfsprogs", "prometheus"), nil)
	m.file(filepath.Join(m.lists, "x_Packages"), "")
	if out, code := m.run("test"); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := "update -qq\ninstall -y -qq --no-install-recommends xfsprogs prometheus\n"
	if log := m.aptLog(); log != want {
		t.Fatalf("apt-get calls:\n%s\nwant:\n%s", log, want)
	}
}

func TestDemoInstallsOnlyFilesystemTools(t *testing.T) {
	m := newMachine(t, "ubuntu", true, []string{"e2fsprogs", "mount"}, nil)
	// No package lists: the demo does not need them, test/vm does.
	if out, code := m.run("demo"); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := "update -qq\ninstall -y -qq --no-install-recommends xfsprogs btrfs-progs\n"
	if log := m.aptLog(); log != want {
		t.Fatalf("apt-get calls:\n%s\nwant:\n%s", log, want)
	}
}

// losetup is in mount, which a Debian root without systemd lacks though
// util-linux (Essential) is there.
func TestDebianRootWithoutMountInstallsLosetup(t *testing.T) {
	m := newMachine(t, "debian", true, append(without(allTestPackages, "mount"), "util-linux"), nil)
	m.file(filepath.Join(m.lists, "x_Packages"), "")
	if out, code := m.run("demo"); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := "update -qq\ninstall -y -qq --no-install-recommends mount\n"
	if log := m.aptLog(); log != want {
		t.Fatalf("apt-get calls:\n%s\nwant:\n%s", log, want)
	}
}

func TestDebianRootWithoutPackageListsUpdates(t *testing.T) {
	m := newMachine(t, "debian", true, allTestPackages, nil)
	if out, code := m.run("test"); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if log := m.aptLog(); log != "update -qq\n" {
		t.Fatalf("apt-get calls %q, want only an update (test/vm's apt-get download needs lists)", log)
	}
}

func TestDebianNotRootNamesPackages(t *testing.T) {
	m := newMachine(t, "debian", false, without(allTestPackages, "btrfs-progs"), nil)
	m.file(filepath.Join(m.lists, "x_Packages"), "")
	out, code := m.run("test")
	if code != 1 || !strings.Contains(out, "missing Debian packages: btrfs-progs") || !strings.Contains(out, "sudo") {
		t.Fatalf("exit %d, output:\n%s\nwant exit 1 naming btrfs-progs and how to install it", code, out)
	}
	if log := m.aptLog(); log != "" {
		t.Fatalf("apt-get ran as non-root: %q", log)
	}
}

func TestNotDebianNamesCommandsAndPackages(t *testing.T) {
	m := newMachine(t, "fedora", true, nil, []string{"mkfs.ext4", "losetup"})
	out, code := m.run("demo")
	if code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{"mkfs.xfs", "(Debian package xfsprogs)", "mkfs.btrfs", "(Debian package btrfs-progs)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, present := range []string{"mkfs.ext4", "losetup"} {
		if strings.Contains(out, present) {
			t.Errorf("output names %s, which is on PATH:\n%s", present, out)
		}
	}
	m.script("mkfs.xfs", "true")
	m.script("mkfs.btrfs", "true")
	if out, code := m.run("demo"); code != 0 || out != "" {
		t.Fatalf("all present on a non-Debian host: exit %d, output %q; want 0 and nothing", code, out)
	}
}

// TestDemoPreflight: without mkfs.xfs and mkfs.btrfs the demo stops at
// once, naming them and how to get them, before it makes anything.
func TestDemoPreflight(t *testing.T) {
	m := newMachine(t, "debian", true, nil, []string{"mkfs.ext4", "losetup", "unshare"})
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "demo.sh")
	cmd.Env = []string{"PATH=" + m.bin, "VOLUMED_SBIN="}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("demo.sh without mkfs.xfs: %v, want exit 1; output:\n%s", err, out)
	}
	want := "make demo needs mkfs.xfs mkfs.btrfs, which this machine lacks: sudo make deps"
	if !strings.HasPrefix(string(out), want) || strings.Count(string(out), "\n") != 1 {
		t.Fatalf("demo.sh says:\n%s\nwant one line starting %q", out, want)
	}
}

// tpm2-tss is installed where the release has it under the name deps.sh
// knows, and its absence elsewhere is no error.
func TestDebianRootInstallsTPM2LibrariesWhereKnown(t *testing.T) {
	m := newMachine(t, "debian", true, allTestPackages, nil)
	m.file(filepath.Join(m.lists, "x_Packages"), "")
	m.script("apt-cache", `case "$2" in libtss2-esys-3.0.2-0|libtss2-rc0|libtss2-mu0|libtss2-tcti-swtpm0) exit 0;; esac; exit 100`)
	if out, code := m.run("test"); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := "update -qq\ninstall -y -qq --no-install-recommends libtss2-esys-3.0.2-0 libtss2-rc0 libtss2-mu0 libtss2-tcti-swtpm0\n"
	if log := m.aptLog(); log != want {
		t.Fatalf("apt-get calls:\n%s\nwant:\n%s", log, want)
	}
	if out, code := m.run("demo"); code != 0 || out != "" {
		t.Fatalf("deps.sh demo: exit %d %s; the demo needs no TPM", code, out)
	}

	other := newMachine(t, "ubuntu", true, allTestPackages, nil)
	other.file(filepath.Join(other.lists, "x_Packages"), "")
	other.script("apt-cache", `exit 100`)
	if out, code := other.run("test"); code != 0 || out != "" || other.aptLog() != "" {
		t.Fatalf("a release without those names: exit %d, output %q, apt-get %q; want quiet success", code, out, other.aptLog())
	}
}

package ostest

import (
	"archive/tar"
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Machine is one guest: a copy-on-write overlay of the base image (its
// own disk, which every Boot of this Machine boots again), the files a
// test adds to it and its extra disks.
type Machine struct {
	t     testing.TB
	img   *Image
	Name  string
	Dir   string // on the host: the overlay, extra disks, console logs
	Disk  string // the root disk, a qcow2 overlay of Image.Disk
	Cache string // qemu cache mode of every disk (default none: a guest flush reaches the host file)
	// QemuArgs are appended to every boot's qemu command line (a nic,
	// an NVMe disk: "-drive", "...", "-device", "nvme,...").
	QemuArgs []string
	// Cmdline is appended to the kernel's command line.
	Cmdline string

	files []seedFile
	disks []disk
	boots int
	// resume: the snapshot the next boot starts from instead of booting.
	resume *Snapshot
}

type seedFile struct {
	path, content, link string
	mode                os.FileMode
}

type disk struct {
	serial, path, format string
	id                   string // the qemu device's id, for device_del ("" for none)
}

// NewMachine makes a machine of the base image with a fresh overlay.
func (img *Image) NewMachine(t testing.TB, name string) *Machine {
	t.Helper()
	m := img.machineIn(t, name)
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", img.Disk, m.Disk).CombinedOutput()
	if err != nil {
		t.Fatalf("overlay of %s: %v: %s", img.Disk, err, out)
	}
	return m
}

// machineIn is a machine with its directory and no disk yet.
func (img *Image) machineIn(t testing.TB, name string) *Machine {
	t.Helper()
	var dir string
	if os.Getenv("VOLUMED_OS_KEEP") != "" {
		// Kept for a look after the test: disks, consoles, seeds.
		d, err := os.MkdirTemp("", "ostest-"+name+"-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
		t.Logf("%s: kept in %s (VOLUMED_OS_KEEP)", name, dir)
	} else {
		dir = filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &Machine{t: t, img: img, Name: name, Dir: dir, Disk: filepath.Join(dir, "root.qcow2"), Cache: "none"}
}

// AddFile puts a file into the guest's root filesystem at its next boot
// (before systemd loads its units: guest/ostest-seed). Parent directories
// are made as needed.
func (m *Machine) AddFile(path string, mode os.FileMode, content string) {
	m.files = append(m.files, seedFile{path: path, content: content, mode: mode})
}

// AddSymlink puts a symlink path -> target into the guest at its next boot.
func (m *Machine) AddSymlink(path, target string) {
	m.files = append(m.files, seedFile{path: path, link: target})
}

// AddUnit adds a systemd unit (to /etc/systemd/system) and enables it in
// each of wantedBy ("multi-user.target").
func (m *Machine) AddUnit(name, content string, wantedBy ...string) {
	m.AddFile("/etc/systemd/system/"+name, 0o644, content)
	for _, w := range wantedBy {
		m.AddSymlink("/etc/systemd/system/"+w+".wants/"+name, "/etc/systemd/system/"+name)
	}
}

// AddTest adds a service NAME.service running script (sh, with
// /usr/lib/ostest/lib.sh sourced: log, kv, fail, check, done_step) with
// its output on the console, enabled in multi-user.target. unit is
// extra [Unit] lines (ordering: "After=volumed-wait@data.service").
// It is Type=exec, not oneshot: the boot is finished once it has started,
// so the script can wait for that (systemctl is-system-running --wait)
// and then ask systemd-analyze about it.
func (m *Machine) AddTest(name, unit, script string) {
	m.AddFile("/usr/lib/ostest/"+name+".sh", 0o755, "#!/bin/sh\n. /usr/lib/ostest/lib.sh\n"+script)
	m.AddUnit(name+".service", fmt.Sprintf(`[Unit]
Description=ostest %s
%s

[Service]
Type=exec
ExecStart=/usr/lib/ostest/%s.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
`, name, unit, name), "multi-user.target")
}

// AddDisk makes a blank raw disk file of size bytes, attached at every
// boot as a virtio disk with the serial given (/dev/disk/by-id/virtio-SERIAL
// in the guest). It returns the file on the host.
func (m *Machine) AddDisk(serial string, size int64) string {
	m.t.Helper()
	p := filepath.Join(m.Dir, "disk-"+serial+".img")
	f, err := os.Create(p)
	if err == nil {
		err = f.Truncate(size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		m.t.Fatal(err)
	}
	m.disks = append(m.disks, disk{serial: serial, path: p, format: "raw"})
	return p
}

// AddQcow2Disk is AddDisk in qcow2, for a machine that is to be saved
// (Run.Save): qemu snapshots only disks that can hold one.
func (m *Machine) AddQcow2Disk(serial string, size int64) string {
	m.t.Helper()
	p := filepath.Join(m.Dir, "disk-"+serial+".qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, fmt.Sprint(size)).CombinedOutput(); err != nil {
		m.t.Fatalf("disk %s: %v: %s", serial, err, out)
	}
	m.disks = append(m.disks, disk{serial: serial, path: p, format: "qcow2"})
	return p
}

// seed writes the files added since the last boot as a tar archive for
// guest/ostest-seed, or returns "" when there are none.
func (m *Machine) seed() (string, error) {
	if len(m.files) == 0 {
		return "", nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range m.files {
		h := &tar.Header{Name: strings.TrimPrefix(f.path, "/"), Mode: int64(f.mode.Perm()), ModTime: time.Now()}
		if f.link != "" {
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.link, 0o777
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return "", err
		}
		if _, err := tw.Write([]byte(f.content)); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	// A disk is whole sectors; tar's zero blocks pad it.
	if pad := buf.Len() % 4096; pad != 0 {
		buf.Write(make([]byte, 4096-pad))
	}
	p := filepath.Join(m.Dir, fmt.Sprintf("seed-%d.tar", m.boots))
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	m.files = nil
	return p, nil
}

// guestCmdline: a guest has nothing to defend against the other process
// sharing its emulated CPU, and the mitigations of speculation attacks
// are paid for on every system call under TCG (a power cut's check boot:
// 32.3 s with them off against 34.3 s on). cryptomgr.notests skips the
// kernel's self-tests of its crypto algorithms, CPU work at every boot.
// no_timer_check: on a busy host the kernel's check of the IO-APIC timer
// can see no tick in its delay loop and panic ("IO-APIC + timer doesn't
// work!"). tsc=reliable and audit=0 gained nothing measurable
// (docs/performance.md, "Round 4 of the tier's cost").
const guestCmdline = "mitigations=off cryptomgr.notests no_timer_check"

// qemuArgs is the command line of the next boot.
func (m *Machine) qemuArgs(seed, monSock string) []string {
	// qemu64, not max: see test/vm's cpuFor.
	cpu := cmp.Or(os.Getenv("VOLUMED_OS_CPU"), "qemu64")
	if m.img.accel == "kvm" {
		cpu = "host"
	}
	args := []string{
		"-accel", m.img.accel, "-cpu", cpu, "-m", fmt.Sprint(m.img.mem), "-smp", fmt.Sprint(m.img.smp),
		"-nodefaults", "-nographic", "-no-reboot", "-serial", "stdio",
		"-kernel", m.img.Kernel, "-initrd", m.img.Initrd,
		"-append", strings.TrimSpace("root=LABEL=ostest-root rw console=ttyS0 panic=-1 loglevel=4 " + guestCmdline + " " + m.Cmdline),
		"-drive", "file=" + m.Disk + ",if=none,id=root,format=qcow2,cache=" + m.Cache,
		"-device", "virtio-blk-pci,drive=root,serial=ostest-root",
		"-device", "virtio-rng-pci",
		"-monitor", "unix:" + monSock + ",server=on,wait=off",
	}
	for i, d := range m.disks {
		dev := fmt.Sprintf("virtio-blk-pci,drive=xd%d,serial=%s", i, d.serial)
		if d.id != "" {
			dev += ",id=" + d.id
		}
		args = append(args, "-drive", fmt.Sprintf("file=%s,if=none,id=xd%d,format=%s,cache=%s", d.path, i, d.format, m.Cache),
			"-device", dev)
	}
	if seed != "" {
		args = append(args, "-drive", "file="+seed+",if=none,id=seed,format=raw,readonly=on",
			"-device", "virtio-blk-pci,drive=seed,serial=ostest-seed")
	}
	return append(args, slices.Clone(m.QemuArgs)...)
}

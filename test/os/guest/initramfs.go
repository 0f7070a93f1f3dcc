// Command initramfs is the test guests' whole initramfs (build-image.sh
// packs it as /init with the virtio modules): it loads the modules, mounts
// the ext4 filesystem labelled as root= says read-write, and executes
// /sbin/init there. Debian's initramfs-tools ran udev, a coldplug and its
// scripts first: about 4 s of every boot's emulated CPU, for one disk
// whose driver and label are known.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		// Init's exit panics the kernel, and panic=-1 ends the boot: the
		// test sees this line and the panic on the console.
		fmt.Fprintf(os.Stderr, "ostest initramfs: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	if err := unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, ""); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", 0, ""); err != nil {
		return fmt.Errorf("mount /sys: %w", err)
	}
	if err := loadModules("/modules"); err != nil {
		return err
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	label, ok := rootLabel(string(cmdline))
	if !ok {
		return fmt.Errorf("no root=LABEL= on the command line: %q", cmdline)
	}
	dev, err := waitForLabel(label, 2*time.Minute)
	if err != nil {
		return err
	}
	if err := unix.Mount(dev, "/root", "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s on /root: %w", dev, err)
	}
	for _, m := range []string{"/dev", "/proc", "/sys"} {
		if err := unix.Mount(m, "/root"+m, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", m, err)
		}
	}
	// switch_root without deleting the initramfs's files: they are a few
	// MB of the guest's memory.
	if err := unix.Chdir("/root"); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return unix.Exec("/sbin/init", append([]string{"/sbin/init"}, os.Args[1:]...), os.Environ())
}

// loadModules loads dir's modules in the order of their names
// (build-image.sh numbers them in modprobe's dependency order).
func loadModules(dir string) error {
	names, err := filepath.Glob(filepath.Join(dir, "*.ko"))
	if err != nil {
		return err
	}
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load %s: %w", filepath.Base(n), err)
		}
	}
	return nil
}

func rootLabel(cmdline string) (string, bool) {
	for _, f := range strings.Fields(cmdline) {
		if l, ok := strings.CutPrefix(f, "root=LABEL="); ok {
			return l, true
		}
	}
	return "", false
}

// waitForLabel finds the virtio disk whose ext4 superblock carries label,
// waiting for the driver to bring the disks up.
func waitForLabel(label string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		disks, _ := filepath.Glob("/sys/block/vd*")
		for _, d := range disks {
			dev := "/dev/" + filepath.Base(d)
			if l, ok := ext4Label(dev); ok && l == label {
				return dev, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no ext4 filesystem labelled %q on %v after %s", label, disks, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ext4Label reads the volume name of an ext2/3/4 superblock (at 1024: the
// magic 0xEF53 at 56, the name's 16 bytes at 120).
func ext4Label(dev string) (string, bool) {
	f, err := os.Open(dev)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sb := make([]byte, 136)
	if _, err := f.ReadAt(sb, 1024); err != nil || sb[56] != 0x53 || sb[57] != 0xEF {
		return "", false
	}
	return string(bytes.TrimRight(sb[120:136], "\x00")), true
}

package hostcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost has the given programs on its PATH, the given /proc/filesystems
// and module files under /lib/modules/6.1.0-test.
func fakeHost(t *testing.T, programs []string, procFilesystems string, modules ...string) Host {
	t.Helper()
	root, bin := t.TempDir(), t.TempDir()
	for _, p := range programs {
		if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/filesystems", procFilesystems)
	for _, m := range modules {
		write(filepath.Join("lib/modules/6.1.0-test", m), "")
	}
	t.Setenv("PATH", bin)
	return Host{Root: root, Release: "6.1.0-test", LookPath: exec.LookPath}
}

func whats(lacks []Lack) string {
	var s []string
	for _, l := range lacks {
		s = append(s, l.What)
	}
	return strings.Join(s, ", ")
}

func TestFilesystem(t *testing.T) {
	h := fakeHost(t, []string{"mkfs.ext4", "resize2fs", "e2fsck", "mkfs.btrfs"},
		"nodev\tsysfs\nnodev\ttmpfs\n\text4\n",
		"kernel/fs/btrfs/btrfs.ko.zst")
	for _, c := range []struct{ fstype, want string }{
		{"ext4", ""},
		{"xfs", "mkfs.xfs, xfs_growfs, xfs_repair, the xfs filesystem in its kernel"},
		{"btrfs", "btrfs"}, // the module is there, the grow tool is not
	} {
		if got := whats(h.Filesystem(c.fstype)); got != c.want {
			t.Errorf("%s lacks %q, want %q", c.fstype, got, c.want)
		}
	}
	l := h.Filesystem("xfs")[0]
	if !strings.Contains(l.String(), "install xfsprogs") {
		t.Errorf("a missing mkfs.xfs says %q, want it to name xfsprogs", l)
	}
}

func TestFilesystemNotInProcButModule(t *testing.T) {
	h := fakeHost(t, []string{"mkfs.xfs", "xfs_growfs", "xfs_repair"}, "\text4\n", "kernel/fs/xfs/xfs.ko")
	if got := h.Filesystem("xfs"); len(got) != 0 {
		t.Fatalf("xfs as a loadable module: lacks %q, want nothing", whats(got))
	}
}

func TestEncryption(t *testing.T) {
	bare := fakeHost(t, nil, "")
	if got, want := whats(bare.Encryption(true)), "cryptsetup, dm-crypt in its kernel, /dev/tpmrm0"; got != want {
		t.Errorf("a bare host lacks %q, want %q", got, want)
	}
	if l := bare.Encryption(false)[0]; !strings.Contains(l.String(), "install cryptsetup-bin") {
		t.Errorf("the lack of cryptsetup says %q, not which package gives it", l)
	}
	h := fakeHost(t, []string{"cryptsetup"}, "", "kernel/drivers/md/dm-crypt.ko.xz")
	if got := whats(h.Encryption(false)); got != "" {
		t.Errorf("a host with cryptsetup and the dm-crypt module lacks %q for a key file", got)
	}
	if got := whats(h.Encryption(true)); got != "/dev/tpmrm0" {
		t.Errorf("a host without /dev/tpmrm0 lacks %q for a tpm2 key, want /dev/tpmrm0", got)
	}
	if err := os.MkdirAll(filepath.Join(h.Root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.Root, "dev/tpmrm0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := whats(h.Encryption(true)); got != "" {
		t.Errorf("a host with everything lacks %q", got)
	}
}

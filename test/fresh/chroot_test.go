package fresh

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// chrootPath is a root's PATH: the sbin directories too, where mkfs and
// losetup live.
const chrootPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// newRoot unpacks the base tarball into a new directory and readies it
// to run apt: /proc, /dev, the host's resolver, apt's download cache
// (kept across runs) and a policy-rc.d that starts no service. The mounts
// are in the test's private namespace (testns) and undone at its end.
func newRoot(t *testing.T, tarball, cache string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", tarball, "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", tarball, err, out)
	}
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "etc/resolv.conf"), resolv, 0o644)
	write(t, filepath.Join(root, "usr/sbin/policy-rc.d"), []byte("#!/bin/sh\nexit 101\n"), 0o755)
	mount(t, "proc", filepath.Join(root, "proc"), "proc", 0)
	mount(t, "/dev", filepath.Join(root, "dev"), "", unix.MS_BIND|unix.MS_REC)
	mount(t, filepath.Join(cache, "archives"), filepath.Join(root, "var/cache/apt/archives"), "", unix.MS_BIND)
	return root
}

func write(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

func mount(t *testing.T, src, dst, fstype string, flags uintptr) {
	t.Helper()
	if err := unix.Mount(src, dst, fstype, flags, ""); err != nil {
		t.Fatalf("mount %s on %s: %v", src, dst, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
}

// inRoot runs a program in root with a clean environment and returns
// its output (stdout and stderr) and exit status.
func inRoot(t *testing.T, root string, argv ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{root, "/usr/bin/env", "-i", chrootPath, "HOME=/root", "LANG=C"}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("chroot %s %v: %v", root, argv, err)
	}
	return out.String(), 0
}

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// After a reboot the state file still names a volume's loop device by
// its image's device and inode numbers, which name a file only while it
// lives. The image deleted while the agent was down, and another file that
// reused its inode attached by someone else (a tool, an fstab loop mount):
// that device is not the volume's. The volume gets an image and a device
// of its own; the stranger's device is neither mounted nor detached. The
// new image is blank where the volume had a filesystem, so it is not
// formatted and shown Ready as if nothing were lost: IdentityChanged says
// so, until the operator takes the volume down and brings it back.
func TestStaleRecordIgnoresAnotherFileOnTheSameInode(t *testing.T) {
	e := newEnv(t)
	// A filesystem of its own, where ext4 hands a freed inode out again.
	disk := filepath.Join(e.dir, "disk")
	fs := e.image("disk.img", 64<<20)
	for _, c := range [][]string{{"mkfs.ext4", "-q", "-F", fs}, {"mkdir", disk}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	dev := losetup(t, fs)
	if err := unix.Mount(dev, disk, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(disk, "v.img")
	e.loopManifest("v", img, "16Mi", "type: ext4")
	e.start()
	old := find(e.waitReady("v"), "v").Device
	ino := inode(t, img)
	e.kill()

	// The reboot: the volume's mounts and device are gone.
	for _, p := range []string{e.target("v"), e.staging("v")} {
		if err := unix.Unmount(p, 0); err != nil {
			t.Fatalf("unmount %s: %v", p, err)
		}
	}
	if out, err := exec.Command("losetup", "-d", old).CombinedOutput(); err != nil {
		t.Fatalf("losetup -d %s: %v: %s", old, err, out)
	}
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(disk, "other.img")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, other); got != ino {
		t.Fatalf("the new file got inode %d, not the freed %d: the test cannot reach its point", got, ino)
	}
	if err := os.Truncate(other, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", other).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	stranger := losetup(t, other)

	e.start()
	e.waitCondition("v", "IdentityChanged", "blank")
	st, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	v := find(st, "v")
	if v.Device == stranger {
		t.Errorf("the volume took %s, someone else's device on %s, for its own", stranger, other)
	}
	if _, err := os.Stat(img); err != nil {
		t.Errorf("the volume's image was not made again: %v", err)
	}
	for p, ms := range e.mounts() {
		for _, m := range ms {
			if m.Source == stranger {
				t.Errorf("the stranger's device %s is mounted at %s", stranger, p)
			}
		}
	}
	if files := e.loops()[other]; len(files) != 1 || files[0] != stranger {
		t.Errorf("the stranger's device: %v, want %s still on %s", files, stranger, other)
	}
}

// losetup attaches file to a free loop device; the env's cleanup
// detaches it (its file is under the env's dir).
func losetup(t *testing.T, file string) string {
	t.Helper()
	out, err := exec.Command("losetup", "-f", "--show", file).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", file, err, out)
	}
	return strings.TrimSpace(string(out))
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

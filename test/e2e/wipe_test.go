package e2e

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wipeCmd runs volumed wipe against the env's state and socket.
func (e *env) wipeCmd(args ...string) (string, error) {
	all := append([]string{"wipe", "--state-dir", e.state, "--socket", e.socket}, args...)
	out, err := exec.Command(volumedBin, all...).CombinedOutput()
	return string(out), err
}

func mustRun(t *testing.T, stdin string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// writeAt writes b into the image file at off (a synthetic label).
func writeAt(t *testing.T, img string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// zfsLabels writes synthetic ZFS labels: the uberblock magic 0x00bab10c
// in the first uberblock slots (128 KiB into each 256 KiB label) of the
// two labels at the start and the two at the 256 KiB-aligned end, which
// is where blkid (and ZFS) look. Synthetic: Debian's kernel tools have
// no way to write a pool without the zfs module.
func zfsLabels(t *testing.T, img string, size int64) {
	t.Helper()
	const label = 256 << 10
	end := size &^ (label - 1)
	ub := make([]byte, 8)
	binary.LittleEndian.PutUint64(ub, 0x00bab10c)
	for _, l := range []int64{0, label, end - 2*label, end - label} {
		for slot := int64(0); slot < 8; slot++ {
			writeAt(t, img, l+128<<10+slot*1024, ub)
		}
	}
}

// Each signature, written by its own tool where Debian has one (ext4,
// xfs, GPT, dos, LUKS2, LVM) and synthetic, with the exact magic and
// offsets, where it has none that works without a kernel module (md, ZFS,
// Ceph bluestore): volumed wipe without --yes prints its plan and
// changes nothing; with --yes the disk is blank by the blank rule
// (volumed disks) and blkid finds nothing.
func TestWipeEverySignature(t *testing.T) {
	e := newEnv(t)
	const size = 320 << 20 // mkfs.xfs wants 300 MiB
	cases := []struct {
		name  string
		write func(t *testing.T, dev, img string)
	}{
		{"ext4", func(t *testing.T, dev, _ string) { mustRun(t, "", "mkfs.ext4", "-q", dev) }},
		{"xfs", func(t *testing.T, dev, _ string) { mustRun(t, "", "mkfs.xfs", "-q", "-f", dev) }},
		{"gpt", func(t *testing.T, dev, _ string) {
			mustRun(t, "", "sgdisk", "-n", "1:2048:+64M", dev)
			mustRun(t, "", "partx", "-u", dev)
			ensurePartition(t, dev, 2048, 131072)
			mustRun(t, "", "mkfs.ext4", "-q", dev+"p1")
		}},
		{"dos", func(t *testing.T, dev, _ string) {
			mustRun(t, "label: dos\nstart=2048, size=131072, type=83\n", "sfdisk", "-q", dev)
			ensurePartition(t, dev, 2048, 131072)
			mustRun(t, "", "mkfs.ext4", "-q", dev+"p1")
		}},
		{"luks", func(t *testing.T, dev, img string) {
			key := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(key, []byte("wipe-test-key"), 0o600); err != nil {
				t.Fatal(err)
			}
			mustRun(t, "", "cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", key, img)
		}},
		{"lvm", func(t *testing.T, dev, _ string) { mustRun(t, "", "pvcreate", "-ff", "-y", dev) }},
		{"md-synthetic", func(t *testing.T, _, img string) {
			magic := binary.LittleEndian.AppendUint32(nil, 0xa92b4efc)
			writeAt(t, img, size&^(64<<10-1)-64<<10, magic) // v0.90, at the end
			writeAt(t, img, (size-8<<10)&^(4<<10-1), magic) // v1.0, at the end
		}},
		{"zfs-synthetic", func(t *testing.T, _, img string) { zfsLabels(t, img, size) }},
		{"ceph-bluestore-synthetic", func(t *testing.T, _, img string) {
			writeAt(t, img, 0, []byte("bluestore block device\n"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each on a loop disk of its own
			dev, img := e.loopDisk(c.name+".img", size)
			c.write(t, dev, img)
			mustRun(t, "", "losetup", "-c", dev) // the kernel sees what was written to the file
			if r := row(t, disksJSON(t, "--socket", e.socket), dev); r.Blank || len(r.Signatures) == 0 {
				t.Fatalf("the %s disk before the wipe: %+v, want a signature", c.name, r)
			}
			before := fileSum(t, img)
			out, err := e.wipeCmd(dev)
			if err != nil || !strings.Contains(out, "would:") || !strings.Contains(out, "Nothing was done") {
				t.Fatalf("wipe without --yes: %v\n%s", err, out)
			}
			if fileSum(t, img) != before {
				t.Fatalf("wipe without --yes wrote to the disk:\n%s", out)
			}
			out, err = e.wipeCmd("--yes", dev)
			if err != nil || !strings.Contains(out, dev+" is blank") {
				t.Fatalf("wipe --yes: %v\n%s", err, out)
			}
			if r := row(t, disksJSON(t, "--socket", e.socket), dev); !r.Blank || len(r.Signatures) != 0 {
				t.Errorf("after the wipe: %+v\n%s", r, out)
			}
			if out, err := exec.Command("blkid", "-p", dev).CombinedOutput(); err == nil {
				t.Errorf("blkid still finds: %s", out)
			}
		})
	}
}

// ensurePartition has the kernel list partition 1 of dev (its reread may
// not have), as a disk's kernel would.
func ensurePartition(t *testing.T, dev string, start, sectors int) {
	t.Helper()
	if _, err := os.Stat(dev + "p1"); err != nil {
		mustRun(t, "", "addpart", dev, "1", fmt.Sprint(start), fmt.Sprint(sectors))
	}
	waitNode(t, dev+"p1")
}

// volumed wipe refuses a disk that is mounted, one open exclusively
// elsewhere, and one a volume holds in the state; once the volume's
// manifest is gone, --volume finds its disk from the state.
func TestWipeRefusals(t *testing.T) {
	e := newEnv(t)
	dev, img := e.loopDisk("disk.img", 64<<20)
	mustRun(t, "", "mkfs.ext4", "-q", dev)

	mnt := t.TempDir()
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	if out, err := e.wipeCmd("--yes", dev); err == nil || !strings.Contains(out, "mounted at "+mnt) {
		t.Errorf("wipe of a mounted disk: %v\n%s", err, out)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	sum := fileSum(t, img) // after the mount, which writes its own superblock

	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.wipeCmd("--yes", dev)
	unix.Close(fd)
	if err == nil || !strings.Contains(out, "open exclusively") {
		t.Errorf("wipe of a disk open exclusively elsewhere: %v\n%s", err, out)
	}

	e.write("data.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: data}
spec:
  source: {device: {path: %s}}
  mounts: [{path: %s, block: true}]
`, dev, e.target("data-dev")))
	e.start()
	e.waitReady("data")
	e.stop()
	e.waitExit(30 * time.Second)
	// A raw block volume, so nothing mounts the disk, and the agent
	// stopped: the state alone says whose it is.
	if out, err := e.wipeCmd("--yes", dev); err == nil || !strings.Contains(out, "volume data") {
		t.Errorf("wipe of a volume's disk: %v\n%s", err, out)
	}
	if out, err := e.wipeCmd("--yes", "--volume", "data"); err == nil || !strings.Contains(out, "still in the state") {
		t.Errorf("wipe --volume of a volume in the state: %v\n%s", err, out)
	}
	if fileSum(t, img) != sum {
		t.Fatal("a refused wipe wrote to the disk")
	}

	e.remove("data.yaml")
	e.start()
	e.waitGone("data")
	out, err = e.wipeCmd("--yes", "--volume", "data")
	if err != nil || !strings.Contains(out, "volume data used "+dev) || !strings.Contains(out, dev+" is blank") {
		t.Errorf("wipe --volume of a former volume: %v\n%s", err, out)
	}
}

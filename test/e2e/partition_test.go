package e2e

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/api"
	diskdrv "github.com/volumed/volumed/drivers/disk"
)

// loopDisk makes a blank image of size bytes under the env and a loop
// device on it that scans partitions; the env's cleanup detaches it (after
// unmounting what the agent mounted from it). Every selector in these
// tests names the device's path, so the agent never takes another test's
// loop device, whatever else it lists.
func (e *env) loopDisk(name string, size int64) (dev, img string) {
	e.t.Helper()
	img = e.image(name, size)
	out, err := exec.Command("losetup", "-f", "--show", "-P", img).CombinedOutput()
	if err != nil {
		e.t.Fatalf("losetup: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out)), img
}

// gptArea hashes where a GPT lives: the protective MBR, the primary
// header and entries (the first 34 sectors) and the backup (the last 33).
func gptArea(t *testing.T, img string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(b[:34*512])
	h.Write(b[len(b)-33*512:])
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func (e *env) partitionManifest(name, diskPath, label, size, fstype string) {
	e.t.Helper()
	amount := "size: " + size
	if size == "grow" {
		amount = "grow: true"
	}
	e.write(name+".yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source:
    partition:
      disk: {match: 'disk.transport == "loop" && disk.path == %q'}
      label: %s
      %s
  filesystem: {type: %s, grow: true}
  mounts: [{path: %s}]
`, name, diskPath, label, amount, fstype, e.target(name)))
}

func (e *env) diskManifest(name, match string) {
	e.t.Helper()
	e.write(name+".yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source: {disk: {match: '%s'}}
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, name, match, e.target(name)))
}

// waitError waits until volume name's last error holds every one of words.
func (e *env) waitError(name string, words ...string) *api.Volume {
	e.t.Helper()
	st := e.waitFor(name+" failing with "+strings.Join(words, ","), func(st *api.Status) bool {
		v := find(st, name)
		return v != nil && v.Phase != api.PhaseReady && containsAll(v.LastError, words)
	})
	return find(st, name)
}

// gptNames lists the partition names sgdisk reads on the image.
func gptNames(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command("sgdisk", "-p", img).CombinedOutput()
	if err != nil {
		t.Fatalf("sgdisk -p: %v\n%s", err, out)
	}
	return string(out)
}

// A blank disk becomes two mounted partition volumes; a whole disk picked
// by an expression becomes a third; a disk holding ext4 is never written;
// a second volume whose expression picks a disk another volume holds is
// refused; an expression no disk matches says why per disk. A restart
// changes nothing on the disks.
func TestDisksAndPartitions(t *testing.T) {
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "1s"}
	shared, sharedImg := e.loopDisk("shared.img", 96<<20)
	whole, _ := e.loopDisk("whole.img", 40<<20)
	spare, _ := e.loopDisk("spare.img", 40<<20)
	foreign, foreignImg := e.loopDisk("foreign.img", 24<<20)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", foreign).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	foreignSum := sha(t, foreignImg)

	e.partitionManifest("alpha", shared, "alpha", "32Mi", "ext4")
	e.partitionManifest("beta", shared, "beta", "grow", "ext4")
	e.partitionManifest("intruder", foreign, "intruder", "8Mi", "ext4")
	e.diskManifest("whole", fmt.Sprintf(`disk.path in [%q, %q] && disk.size == 40 * MiB`, whole, spare))
	e.diskManifest("none", fmt.Sprintf(`disk.path == %q && disk.size == 41 * MiB`, whole))
	e.start()
	st := e.waitReady("alpha", "beta", "whole")
	for _, n := range []string{"alpha", "beta", "whole"} {
		if len(e.mounts()[e.target(n)]) != 1 {
			t.Errorf("%s: target not mounted once", n)
		}
	}
	// Two disks match: the first by path, and the status says so.
	var first string
	if diskdrv.Compare(spare, whole) < 0 {
		first = spare
	} else {
		first = whole
	}
	if v := find(st, "whole"); v.Device != first || !strings.Contains(v.LastError, "2 disks match") {
		t.Errorf("whole: device %s, note %q; want %s, first of two by path", v.Device, v.LastError, first)
	}
	whole = first
	for _, n := range []string{"alpha", "beta"} {
		if d := find(st, n).Device; !strings.HasPrefix(d, shared+"p") {
			t.Errorf("%s: device %s, not a partition of %s", n, d, shared)
		}
	}
	names := gptNames(t, sharedImg)
	if !strings.Contains(names, "alpha") || !strings.Contains(names, "beta") {
		t.Errorf("the shared disk's table:\n%s", names)
	}
	v := e.waitError("intruder", "not writing disk "+foreign, "not blank", "ext4")
	if v.Device != "" {
		t.Errorf("intruder: device %q", v.Device)
	}
	e.waitError("none", "no disk matches", whole+":", "disk.size == 41 * MiB", "disk.size is 41943040")
	if sha(t, foreignImg) != foreignSum {
		t.Error("the disk holding ext4 was written")
	}

	// A second volume whose expression picks the held disk is refused.
	e.diskManifest("twin", fmt.Sprintf(`disk.path == %q`, whole))
	e.waitError("twin", "already volume whole's")

	// The partition volumes' disk shows which volumes hold it.
	rows := disksJSON(t, "--socket", e.socket)
	if r := row(t, rows, whole); len(r.Volumes) != 1 || r.Volumes[0] != "whole" {
		t.Errorf("volumed disks, %s: %+v", whole, r)
	}
	if r := row(t, rows, shared); strings.Join(r.Volumes, ",") != "alpha,beta" {
		t.Errorf("volumed disks, %s: %+v", shared, r)
	}

	sharedSum := gptArea(t, sharedImg)
	e.stop()
	e.start()
	e.waitReady("alpha", "beta", "whole")
	e.waitError("twin", "already volume whole's")
	if gptArea(t, sharedImg) != sharedSum {
		t.Error("the restart rewrote the shared disk's table")
	}
	if sha(t, foreignImg) != foreignSum {
		t.Error("the disk holding ext4 was written after the restart")
	}
}

// SIGKILL between the table write and telling the kernel: the restarted
// agent adds the partition to the kernel without writing the table again.
func TestPartitionCrashAfterTableWrite(t *testing.T) {
	e := newEnv(t)
	disk, img := e.loopDisk("disk.img", 64<<20)
	e.partitionManifest("alpha", disk, "alpha", "16Mi", "ext4")
	e.start("VOLUMED_CRASH_AT=partition:after-write")
	if !e.waitExit(60 * time.Second) {
		t.Fatal("agent did not die at partition:after-write")
	}
	written := gptArea(t, img)
	if !strings.Contains(gptNames(t, img), "alpha") {
		t.Fatal("no table on the disk at the crash")
	}
	if _, err := os.Stat(filepath.Join("/sys/class/block", filepath.Base(disk), filepath.Base(disk)+"p1")); err == nil {
		t.Fatal("the kernel has the partition already: the crash point is after BLKPG")
	}
	e.start()
	st := e.waitReady("alpha")
	if d := find(st, "alpha").Device; d != disk+"p1" {
		t.Errorf("device %s, want %sp1", d, disk)
	}
	if gptArea(t, img) != written {
		t.Error("the table was written again after the crash")
	}

	// A volume added later gets its partition in the table volumed wrote,
	// beside the mounted one, which is left as it was.
	if err := os.WriteFile(filepath.Join(e.target("alpha"), "keep"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.partitionManifest("beta", disk, "beta", "16Mi", "ext4")
	st = e.waitReady("alpha", "beta")
	if d := find(st, "beta").Device; d != disk+"p2" {
		t.Errorf("beta: device %s, want %sp2", d, disk)
	}
	if b, err := os.ReadFile(filepath.Join(e.target("alpha"), "keep")); err != nil || string(b) != "data" {
		t.Errorf("alpha's data after beta was added: %q %v", b, err)
	}
	if names := gptNames(t, img); !strings.Contains(names, "alpha") || !strings.Contains(names, "beta") {
		t.Errorf("the table after beta was added:\n%s", names)
	}
}

// The disk grows (image extended, loop capacity re-read): at the resync
// the partition that takes the rest of the disk grows into it, and its
// mounted filesystem with it; the sized one stays as it is. (btrfs: it
// grows online here where ext4's resize ioctl is refused, and it refuses
// to be resized below 256 MiB, hence the sizes.)
func TestPartitionGrowsWithDisk(t *testing.T) {
	e := newEnv(t)
	e.extraArgs = []string{"--resync", "500ms"}
	disk, img := e.loopDisk("disk.img", 320<<20)
	e.partitionManifest("fixed", disk, "fixed", "128Mi", "btrfs")
	e.partitionManifest("rest", disk, "rest", "grow", "btrfs")
	e.start()
	st := e.waitReady("fixed", "rest")
	fixedBefore, restBefore := find(st, "fixed").CapacityBytes, find(st, "rest").CapacityBytes
	if err := os.Truncate(img, 512<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("losetup", "-c", disk).CombinedOutput(); err != nil {
		t.Fatalf("losetup -c: %v\n%s", err, out)
	}
	t.Logf("disk grown at %s", time.Now().Format(time.RFC3339Nano))
	st = e.waitFor("rest's filesystem grown", func(st *api.Status) bool {
		v := find(st, "rest")
		return v != nil && v.CapacityBytes > restBefore+150<<20
	})
	if got := find(st, "fixed").CapacityBytes; got != fixedBefore {
		t.Errorf("the sized partition's filesystem went from %d to %d bytes", fixedBefore, got)
	}
	if !strings.Contains(gptNames(t, img), "rest") {
		t.Error("the table lost the partition")
	}
}

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
)

// After loop.file is edited under a live volume, the device still reads
// the old image: PendingChange says the edit waits, no BackingChanged
// calls the new path deleted, and when the old image is deleted the
// condition names that one.
func TestEditedImagePathNamesTheImageInUse(t *testing.T) {
	e, img := readyVolume(t, "e")
	edited := filepath.Join(e.images, "e-new.img")
	e.loopManifest("e", edited, "64Mi", "type: ext4")
	e.waitCondition("e", "PendingChange", edited)
	time.Sleep(2 * time.Second) // several resyncs of 300 ms
	st, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(find(st, "e"), "BackingChanged"); c != nil {
		t.Errorf("BackingChanged while the old image %s is in place: %s: %s", img, c.Reason, c.Message)
	}
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	c := e.waitCondition("e", "BackingChanged", img, "deleted")
	if c.Reason != "ImageDeleted" || strings.Contains(c.Message, edited) {
		t.Errorf("the deleted image's condition: %s: %s; want ImageDeleted naming %s, not %s", c.Reason, c.Message, img, edited)
	}
}

// attachAt binds img to the loop device dev (a disk put at a known
// path); the env's cleanup detaches it.
func (e *env) attachAt(dev, img string) {
	e.t.Helper()
	if out, err := exec.Command("losetup", dev, img).CombinedOutput(); err != nil {
		e.t.Fatalf("losetup %s %s (another process may have taken the device meanwhile): %v: %s", dev, img, err, out)
	}
}

// spareLoop finds an unbound loop device for a test that detaches and
// attaches it again at the same path, making it if need be: a number far
// above those the other tests take (the kernel's lowest free one), so
// none of them takes it meanwhile. On /dev/loop4 this test failed when
// another test took the device between the two.
func spareLoop(t *testing.T) string {
	t.Helper()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	for n := 600 + os.Getpid()%300; n < 1200; n++ {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), unix.LOOP_CTL_ADD, uintptr(n))
		if errno != 0 && errno != unix.EEXIST {
			t.Fatalf("add /dev/loop%d: %v", n, errno)
		}
		if _, err := os.Stat(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", n)); err == nil {
			continue // bound
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		for range 50 { // devtmpfs makes a new node a moment later
			if _, err := os.Stat(dev); err == nil {
				return dev
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: no device node", dev)
	}
	t.Fatal("no unbound loop device from 600 to 1199")
	return ""
}

// dropIdentities makes the state file one written by a volumed that kept
// no identities (the agent is stopped).
func (e *env) dropIdentities() {
	e.t.Helper()
	db, err := bbolt.Open(filepath.Join(e.state, "state.db"), 0o600, &bbolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		if tx.Bucket([]byte("identities")) == nil {
			e.t.Error("no identities bucket: the volume's identity was never recorded")
			return nil
		}
		return tx.DeleteBucket([]byte("identities"))
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// A disk with no WWN or serial (a loop device named by its path) is
// replaced by another disk at the same path between two boots: the other
// disk's filesystem is not mounted, the volume is not Ready, and
// IdentityChanged names both filesystem UUIDs; the other disk's bytes are
// untouched. With its own disk back the volume is Ready with its data. A
// state file from a volumed that kept no identities adopts what is
// mounted at first sight, and is protected from then on.
func TestReplacedDiskAtSamePathIsRefused(t *testing.T) {
	e := newEnv(t)
	e.formattedImages("ours", "other")
	ours, other := filepath.Join(e.images, "ours.img"), filepath.Join(e.images, "other.img")
	oursUUID, otherUUID := fsUUID(t, ours), fsUUID(t, other)
	dev := spareLoop(t)
	e.attachAt(dev, ours)
	target := e.target("d")
	e.write("d.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: d}
spec:
  source: {device: {path: %s}}
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, dev, target))
	e.start()
	e.waitReady("d")
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("ours"), 0o644); err != nil {
		t.Fatal(err)
	}

	// As after an upgrade: the state has the volume, mounted, and no
	// identity; the restart adopts the mount and learns it.
	e.stop()
	e.waitExit(60 * time.Second)
	e.dropIdentities()
	e.start()
	e.waitReady("d")

	e.reboot()
	e.attachAt(dev, other)
	before := sha(t, other)
	e.start()
	c := e.waitCondition("d", "IdentityChanged", dev, oursUUID, otherUUID)
	time.Sleep(time.Second) // retries
	if st, err := e.status(); err != nil || find(st, "d") == nil || find(st, "d").Phase == api.PhaseReady {
		t.Errorf("the volume on another disk: %s, %v", dumpStatus(st), err)
	}
	if n := len(e.mounts()[target]) + len(e.mounts()[e.staging("d")]); n != 0 {
		t.Errorf("the other disk is mounted (%d mounts at the target and staging)", n)
	}
	t.Logf("condition: %s: %s", c.Reason, c.Message)

	e.reboot()
	if after := sha(t, other); after != before {
		t.Errorf("the other disk's bytes changed")
	}
	e.attachAt(dev, ours)
	e.start()
	v := find(e.waitReady("d"), "d")
	if len(v.Conditions) != 0 {
		t.Errorf("conditions with the volume's own disk back: %+v", v.Conditions)
	}
	if b, err := os.ReadFile(filepath.Join(target, "keep")); err != nil || string(b) != "ours" {
		t.Errorf("the volume's file: %q, %v", b, err)
	}
}

// A loop image replaced by another filesystem image between two boots
// (the same path, another file) is refused the same way.
func TestReplacedImageBetweenBootsIsRefused(t *testing.T) {
	e, img := readyVolume(t, "i")
	uuid := fsUUID(t, img)
	e.reboot()
	if err := os.Rename(img, img+".away"); err != nil {
		t.Fatal(err)
	}
	e.formattedImages("i")
	other := fsUUID(t, img)
	e.start()
	e.waitCondition("i", "IdentityChanged", img, uuid, other)
	if n := len(e.mounts()[e.target("i")]); n != 0 {
		t.Errorf("the other image is mounted")
	}
}

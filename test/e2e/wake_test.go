package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
)

// A volume waiting for its disk is retried by that disk's uevent alone:
// loop devices made, bound, unbound and removed meanwhile (a host's
// snaps, another tool's images) leave it to its backoff. Before, each
// device added or removed retried it at once, with an attach each time
// (test/os TestLVMGroup: 11 failed attaches of a volume waiting for a
// third PV in one boot). The disk's own event still brings it up at
// once.
func TestWaitingVolumeRetriesOnlyForItsDisk(t *testing.T) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The loop devices made are removed after the env's cleanup (which
	// runs first: registered later) has unmounted and unbound them.
	var made []int
	t.Cleanup(func() {
		for _, n := range made {
			removeLoop(ctl, n)
		}
		ctl.Close()
	})
	e := newEnv(t)
	// Loop devices numbered past any this host has: each is made (add),
	// bound and unbound (change) and removed (remove), as a host's loop
	// devices come and go.
	next := 3000 + os.Getpid()%1000*4
	add := func() (int, string) {
		t.Helper()
		for {
			next++
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), unix.LOOP_CTL_ADD, uintptr(next))
			if errno == unix.EEXIST {
				continue
			}
			if errno != 0 {
				t.Fatalf("LOOP_CTL_ADD %d: %v", next, errno)
			}
			made = append(made, next)
			return next, fmt.Sprintf("/dev/loop%d", next)
		}
	}
	// The disk the volume waits for: a loop device not there yet.
	wantN := next + 1
	for {
		if _, err := os.Stat(fmt.Sprintf("/sys/block/loop%d", wantN)); errors.Is(err, os.ErrNotExist) {
			break
		}
		wantN++
	}
	next = wantN + 1
	e.write("waiter.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: waiter}
spec:
  source: {device: {path: /dev/loop%d}}
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, wantN, e.target("waiter")))
	e.start()
	e.waitFor("waiter waiting for its disk", func(st *api.Status) bool {
		v := find(st, "waiter")
		return v != nil && strings.Contains(v.LastError, "waiting for the disk")
	})

	img := e.image("other.img", 16<<20)
	const others = 5
	for range others {
		n, dev := add()
		if out, err := exec.Command("losetup", dev, img).CombinedOutput(); err != nil {
			t.Fatalf("losetup %s: %v: %s", dev, err, out)
		}
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Fatalf("losetup -d %s: %v: %s", dev, err, out)
		}
		removeLoop(ctl, n)
		e.waitLog(fmt.Sprintf("block device removed: loop%d", n))
	}
	retriedByEvent := func() int {
		n := 0
		for _, l := range strings.Split(e.logText(), "\n") {
			if strings.Contains(l, "retrying waiting volumes now") && strings.Contains(l, "waiter") {
				n++
			}
		}
		return n
	}
	if n := retriedByEvent(); n != 0 {
		t.Errorf("%d kernel events of %d loop devices that are not its disk retried the waiting volume", n, others)
	}
	t.Logf("attach attempts while %d other loop devices came and went: %d", others,
		strings.Count(e.logText(), `msg="operation failed" volume=waiter operation=attach`))

	// Its disk: made (empty: nothing yet), then bound.
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), unix.LOOP_CTL_ADD, uintptr(wantN))
	if errno != 0 {
		t.Fatalf("LOOP_CTL_ADD %d: %v", wantN, errno)
	}
	made = append(made, wantN)
	disk := e.image("disk.img", 64<<20)
	dev := fmt.Sprintf("/dev/loop%d", wantN)
	if out, err := exec.Command("losetup", dev, disk).CombinedOutput(); err != nil {
		t.Fatalf("losetup %s: %v: %s", dev, err, out)
	}
	e.waitReady("waiter")
	if retriedByEvent() == 0 {
		t.Error("the waiting volume came up without its disk's event retrying it")
	}
	// The disk is the host's: volumed never detaches it.
	e.remove("waiter.yaml")
	e.waitGone("waiter")
	if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
		t.Errorf("losetup -d %s: %v: %s", dev, err, out)
	}
}

// removeLoop removes loop device n, once its unbinding has let go.
func removeLoop(ctl *os.File, n int) {
	for range 100 {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), unix.LOOP_CTL_REMOVE, uintptr(n))
		if errno != unix.EBUSY {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

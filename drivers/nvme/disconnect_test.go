package nvme

// Disconnect: deleting the controller, and refusing while a namespace is held or claimed.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/loop"
)

// holdHead gives a namespace a holder (as device-mapper would) and
// returns a function that takes it away.
func holdHead(t *testing.T, f *fakeFabrics, subsys, name string) func() {
	t.Helper()
	h := filepath.Join(f.sys, "class/nvme-subsystem", subsys, name, "holders", "dm-0")
	mkdir(t, h)
	return func() {
		if err := os.Remove(h); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDisconnect(t *testing.T) {
	f := newFake(t, false)
	f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
	f.namespaces[nqnLogs] = []fakeNS{{nsid: 1, sectors: 8}}
	c := f.client()
	ns, err := c.Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Connect(context.Background(), Options{Target: Target{Transport: "tcp", Address: "192.0.2.11", NQN: nqnLogs}, Namespace: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The same target as another tool might spell it.
	if err := c.Disconnect(context.Background(), Target{Transport: "tcp", Address: "192.0.2.11", NQN: nqnData}); err != nil {
		t.Fatal(err)
	}
	if got := f.deletes(); !slices.Equal(got, []string{"nvme0=1"}) {
		t.Fatalf("delete_controller writes: %q, want nvme0=1", got)
	}
	if _, ok, err := c.Find(context.Background(), tgtData, 1); ok || err != nil {
		t.Errorf("Find after Disconnect = %v, %v", ok, err)
	}
	if exists(ns.Device) {
		t.Errorf("%s still exists", ns.Device)
	}
	if !exists(other.Device) {
		t.Errorf("the other target's %s went too", other.Device)
	}
	// Nothing left to disconnect is not an error, and writes nothing.
	if err := c.Disconnect(context.Background(), tgtData); err != nil {
		t.Fatal(err)
	}
	if n := len(f.deletes()); n != 1 {
		t.Errorf("%d delete_controller writes, want 1", n)
	}
}

func TestDisconnectRefusesHeldNamespace(t *testing.T) {
	f, c, ns := connectOne(t)
	h := filepath.Join(f.sys, "class/nvme", ns.Controller, "nvme0n1", "holders", "dm-3")
	mkdir(t, h)
	if err := c.Disconnect(context.Background(), tgtData); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "dm-3") {
		t.Fatalf("Disconnect of a held namespace = %v, want ErrBusy naming dm-3", err)
	}
	if d := f.deletes(); len(d) != 0 {
		t.Fatalf("deleted anyway: %q", d)
	}
}

// A mounted namespace is claimed exclusively by the kernel. The device
// node here is a real block device (a loop device) held the same way.
func TestDisconnectRefusesClaimedDevice(t *testing.T) {
	f, c, ns := connectOne(t)
	img := filepath.Join(t.TempDir(), "ns.img")
	if _, err := loop.EnsureImage(img, 1<<20); err != nil {
		t.Fatal(err)
	}
	ld, err := loop.Attach(context.Background(), loop.Options{File: img})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(ld.Path, &st); err != nil {
		t.Fatal(err)
	}
	os.Remove(ns.Device)
	if err := unix.Mknod(ns.Device, unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Fatal(err)
	}
	claim, err := unix.Open(ld.Path, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	claimed := true
	t.Cleanup(func() {
		if claimed {
			unix.Close(claim)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := loop.Detach(ctx, *ld); err != nil {
			t.Error(err)
		}
	})

	if err := c.Disconnect(context.Background(), tgtData); !errors.Is(err, ErrBusy) {
		t.Fatalf("Disconnect of a claimed namespace = %v, want ErrBusy", err)
	}
	if d := f.deletes(); len(d) != 0 {
		t.Fatalf("deleted anyway: %q", d)
	}
	unix.Close(claim)
	claimed = false
	if err := c.Disconnect(context.Background(), tgtData); err != nil {
		t.Fatal(err)
	}
	if d := f.deletes(); !slices.Equal(d, []string{"nvme0=1"}) {
		t.Fatalf("delete_controller writes: %q", d)
	}
}

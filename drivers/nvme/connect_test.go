package nvme

// Connect: reusing a controller, finding its namespace after a restart or a wait, and concurrent connects sharing one.

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A controller some other program (or an earlier run) connected is
// reused in any usable state, without a write to /dev/nvme-fabrics.
func TestConnectReusesUsableController(t *testing.T) {
	for _, state := range []string{"live", "connecting", "resetting"} {
		t.Run(state, func(t *testing.T) {
			f := newFake(t, false)
			f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}, {nsid: 2, sectors: 16}}
			// Another tool spelt the port 4420 by default and the same address.
			name := f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, state: state})
			c := f.client()
			for nsid := 1; nsid <= 2; nsid++ {
				ns, err := c.Connect(context.Background(), Options{Target: tgtData, Namespace: nsid, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100"})
				if err != nil {
					t.Fatal(err)
				}
				if ns.Controller != name || ns.NSID != nsid || ns.NewController {
					t.Errorf("Connect = %+v, want nsid %d on reused %s", ns, nsid, name)
				}
			}
			if calls := f.optionCalls(); len(calls) != 0 {
				t.Fatalf("connected again: %q", calls)
			}
		})
	}
	t.Run("deleting is not reused", func(t *testing.T) {
		f := newFake(t, false)
		f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
		old := f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, state: "deleting"})
		ns, err := f.client().Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(f.optionCalls()) != 1 || ns.Controller == old || !ns.NewController {
			t.Fatalf("Connect = %+v after %d writes; want a new controller, not %s", ns, len(f.optionCalls()), old)
		}
	})
	t.Run("other address or subsystem is not reused", func(t *testing.T) {
		f := newFake(t, false)
		f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
		f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.12", trsvcid: "4420", nqn: nqnData, state: "live"})
		f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4421", nqn: nqnData, state: "live"})
		f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnLogs, state: "live"})
		ns, err := f.client().Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(f.optionCalls()) != 1 || ns.Controller != "nvme3" {
			t.Fatalf("Connect = %+v after %d writes; want a new nvme3", ns, len(f.optionCalls()))
		}
	})
	t.Run("host NQN mismatch", func(t *testing.T) {
		f := newFake(t, false)
		f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
		f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, hostnqn: "nqn.2014-08.org.nvmexpress:uuid:other", state: "live"})
		_, err := f.client().Connect(context.Background(), Options{Target: tgtData, Namespace: 1, HostNQN: hostNQN})
		if !errors.Is(err, ErrHostMismatch) {
			t.Fatalf("Connect = %v, want ErrHostMismatch", err)
		}
		if len(f.optionCalls()) != 0 {
			t.Error("connected a second controller")
		}
	})
}

// The kernel refuses a second controller with EALREADY when another
// program connected between our look at sysfs and our write.
func TestConnectAlreadyConnectedByOther(t *testing.T) {
	f := newFake(t, false)
	f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
	f.connectErr = unix.EALREADY
	f.onConnect = func() {
		f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, state: "live"})
	}
	ns, err := f.client().Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Controller != "nvme0" || ns.NewController {
		t.Fatalf("Connect = %+v, want the other program's nvme0, not new", ns)
	}
}

// After a restart (a new Client) and a reboot that numbered the
// controllers the other way round, Find locates each namespace by its
// identity, not by a remembered node name, and connects nothing.
func TestFindByIdentityAfterRestart(t *testing.T) {
	for _, multipath := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "multipath"}[multipath], func(t *testing.T) {
			f := newFake(t, multipath)
			f.namespaces[nqnData] = []fakeNS{{nsid: 7, sectors: 100}}
			f.namespaces[nqnLogs] = []fakeNS{{nsid: 2, sectors: 200}, {nsid: 7, sectors: 300}}
			tgtLogs := Target{Transport: "tcp", Address: "192.0.2.11", Port: 4420, NQN: nqnLogs}
			// "Before the reboot": logs connected first, so it is nvme0.
			c := f.client()
			first, err := c.Connect(context.Background(), Options{Target: tgtLogs, Namespace: 7})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Connect(context.Background(), Options{Target: tgtData, Namespace: 7}); err != nil {
				t.Fatal(err)
			}
			id := first.Identity()

			// "Reboot": everything gone, then data connected first.
			for _, name := range []string{"nvme0", "nvme1"} {
				f.remove(name)
			}
			f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, state: "live"})
			f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnLogs, state: "connecting"})
			calls := len(f.optionCalls())

			restarted := f.client()
			tgt, nsid, err := ParseIdentity(id)
			if err != nil {
				t.Fatal(err)
			}
			ns, ok, err := restarted.Find(context.Background(), tgt, nsid)
			if err != nil || !ok {
				t.Fatalf("Find(%s) = %+v, %v, %v", id, ns, ok, err)
			}
			// logs ns 7 is the second namespace of logs' subsystem, head 2.
			// Direct: controller 1, head 2; multipath: subsystem 1, head 2.
			const wantDev = "nvme1n2"
			if ns.Device != filepath.Join(f.dev, wantDev) || ns.Controller != "nvme1" || ns.SizeBytes != 300*512 || ns.Identity() != id {
				t.Fatalf("Find(%s) = %+v, want /dev/%s on nvme1", id, ns, wantDev)
			}
			if ns.Device == first.Device {
				t.Fatalf("the fixture did not renumber: %s both times", ns.Device)
			}
			if len(f.optionCalls()) != calls {
				t.Error("Find connected something")
			}
			if _, ok, err := restarted.Find(context.Background(), tgt, 3); ok || err != nil {
				t.Errorf("Find of an absent nsid = %v, %v", ok, err)
			}
		})
	}
}

// With native multipath the block device is the subsystem's head, named
// after the subsystem and not the nsid, and the hidden per-path devices
// are not offered.
func TestMultipathHead(t *testing.T) {
	f := newFake(t, true)
	f.namespaces[nqnData] = []fakeNS{{nsid: 5, sectors: 64}}
	c := f.client()
	a, err := c.Connect(context.Background(), Options{Target: tgtData, Namespace: 5})
	if err != nil {
		t.Fatal(err)
	}
	second := Target{Transport: "tcp", Address: "192.0.2.12", Port: 4420, NQN: nqnData}
	b, err := c.Connect(context.Background(), Options{Target: second, Namespace: 5})
	if err != nil {
		t.Fatal(err)
	}
	if a.Device != filepath.Join(f.dev, "nvme0n1") || b.Device != a.Device || a.Controller != "nvme0" || b.Controller != "nvme1" {
		t.Fatalf("paths: %+v and %+v, want both on head /dev/nvme0n1", a, b)
	}
	ctrls, err := c.Controllers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrls) != 2 || ctrls[0].Subsystem != "nvme-subsys0" || ctrls[1].Subsystem != "nvme-subsys0" {
		t.Fatalf("Controllers = %+v, want two in nvme-subsys0", ctrls)
	}

	// The head is in use: removing one path is fine, the last is not.
	busy := holdHead(t, f, "nvme-subsys0", "nvme0n1")
	if err := c.Disconnect(context.Background(), tgtData); err != nil {
		t.Fatalf("Disconnect of one of two paths: %v", err)
	}
	if ns, ok, err := c.Find(context.Background(), second, 5); !ok || err != nil || ns.Device != a.Device {
		t.Fatalf("after removing a path, Find(second) = %+v, %v, %v", ns, ok, err)
	}
	if err := c.Disconnect(context.Background(), second); !errors.Is(err, ErrBusy) {
		t.Fatalf("Disconnect of the last path of a held head = %v, want ErrBusy", err)
	}
	busy()
	if err := c.Disconnect(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if exists(a.Device) {
		t.Errorf("%s still there", a.Device)
	}
}

func TestConnectWaitsForDeviceNode(t *testing.T) {
	f := newFake(t, false)
	f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
	f.noDevNode = true
	done := make(chan struct{})
	f.onConnect = func() {
		// udev makes the node a little after the kernel's uevent.
		go func() {
			defer close(done)
			time.Sleep(50 * time.Millisecond)
			f.makeDevNode("nvme0n1")
		}()
	}
	ns, err := f.client().Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if ns.Device != filepath.Join(f.dev, "nvme0n1") {
		t.Fatalf("Connect = %+v", ns)
	}
}

// A namespace that never shows up (a wrong nsid) ends the wait when the
// context ends or the client's bound passes; the controller stays.
func TestNamespaceWaitHonoursContext(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		f := newFake(t, false)
		f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f.onConnect = cancel // cancelled once the controller exists
		_, err := f.client().Connect(ctx, Options{Target: tgtData, Namespace: 9})
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "namespace 9 did not appear on nvme0 (live)") {
			t.Fatalf("Connect = %v, want context.Canceled naming nvme0", err)
		}
		if ctrls, _ := f.client().Controllers(); len(ctrls) != 1 {
			t.Errorf("controllers after a failed wait: %+v, want the one connected", ctrls)
		}
	})
	t.Run("bound", func(t *testing.T) {
		f := newFake(t, false)
		c := f.client()
		c.Timeout = 20 * time.Millisecond
		_, err := c.Connect(context.Background(), Options{Target: tgtData, Namespace: 9})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Connect = %v, want DeadlineExceeded", err)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		_, c, _ := connectOne(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := c.Find(ctx, tgtData, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Find with a cancelled context = %v", err)
		}
	})
}

// A controller that reconnects after a network flap keeps serving its
// namespace: Find still finds it, and Connect reuses it.
func TestReconnectingControllerKeepsNamespace(t *testing.T) {
	f, c, ns := connectOne(t)
	f.setState(ns.Controller, "connecting")
	again, err := c.Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
	if err != nil || again.Device != ns.Device || again.NewController {
		t.Fatalf("Connect during a flap = %+v, %v", again, err)
	}
	if n := len(f.optionCalls()); n != 1 {
		t.Errorf("%d connects, want 1", n)
	}
}

// slowFabrics widens the window between looking for a controller and
// the kernel making one, as a real connect over the network does.
type slowFabrics struct{ *fakeFabrics }

func (s slowFabrics) Connect(ctx context.Context, options string) (string, error) {
	time.Sleep(30 * time.Millisecond)
	return s.fakeFabrics.Connect(ctx, options)
}

// Volumes on one target attached at the same time share one controller.
func TestConcurrentConnectsShareController(t *testing.T) {
	f := newFake(t, false)
	f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}, {nsid: 2, sectors: 8}, {nsid: 3, sectors: 8}, {nsid: 4, sectors: 8}}
	c := &Client{SysRoot: f.sys, DevRoot: f.dev, Fabrics: slowFabrics{f}}
	type result struct {
		ns  Namespace
		err error
	}
	results := make(chan result, 4)
	for nsid := 1; nsid <= 4; nsid++ {
		go func() {
			var r result
			defer func() { results <- r }() // even if the fake gave up on the test
			r.ns, r.err = c.Connect(context.Background(), Options{Target: tgtData, Namespace: nsid})
		}()
	}
	created := 0
	for range 4 {
		r := <-results
		ns, err := r.ns, r.err
		if err != nil {
			t.Fatal(err)
		}
		if ns.Controller != "nvme0" {
			t.Errorf("nsid %d on %s, want nvme0", ns.NSID, ns.Controller)
		}
		if ns.NewController {
			created++
		}
	}
	if calls := f.optionCalls(); len(calls) != 1 || created != 1 {
		t.Fatalf("%d connects, %d reported as new; want 1 and 1", len(calls), created)
	}
}

package nvme

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/loop"
	"github.com/volumed/volumed/internal/secret"
)

const (
	nqnData = "nqn.2026-01.com.example:data"
	nqnLogs = "nqn.2026-01.com.example:logs"
	hostNQN = "nqn.2014-08.org.nvmexpress:uuid:8f3b7c1e-2d4a-4e5b-9c6d-7e8f9a0b1c2d"
	hostID  = "8f3b7c1e-2d4a-4e5b-9c6d-7e8f9a0b1c2d"
)

var tgtData = Target{Transport: "tcp", Address: "192.0.2.11", Port: 4420, NQN: nqnData}

// dhchapKey makes a valid "DHHC-1:hh:<base64(key+crc32)>:" key of n bytes.
func dhchapKey(t *testing.T, n int, hash string) string {
	t.Helper()
	key := make([]byte, n)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	raw := binary.LittleEndian.AppendUint32(key, crc32.ChecksumIEEE(key))
	return "DHHC-1:" + hash + ":" + base64.StdEncoding.EncodeToString(raw) + ":"
}

func writeSecret(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dhchap")
	if err := os.WriteFile(p, []byte(content+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// connectOne connects nsid 1 of tgtData, the only namespace of a fake
// target without multipath.
func connectOne(t *testing.T) (*fakeFabrics, *Client, Namespace) {
	t.Helper()
	f := newFake(t, false)
	f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
	c := f.client()
	ns, err := c.Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
	if err != nil {
		t.Fatal(err)
	}
	return f, c, ns
}

func TestConnectWritesExactOptionString(t *testing.T) {
	f := newFake(t, false)
	f.namespaces[nqnData] = []fakeNS{{nsid: 3, sectors: 2097152}}
	// A 48-byte key: its base64 ends in '=' padding, which must pass.
	key := dhchapKey(t, 48, "02")
	if !strings.Contains(key, "=") {
		t.Fatalf("test key %q has no padding", key)
	}
	o := Options{
		Target:    tgtData,
		Namespace: 3, HostNQN: hostNQN, HostID: strings.ToUpper(hostID),
		CtrlLossTmo: time.Hour, ReconnectDelay: 5 * time.Second, KeepAliveTmo: 15 * time.Second,
		NrIOQueues: 4, DHCHAPSecretFile: writeSecret(t, key, 0o600),
	}
	ns, err := f.client().Connect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	want := "nqn=" + nqnData + ",transport=tcp,traddr=192.0.2.11,trsvcid=4420,hostnqn=" + hostNQN +
		",hostid=" + hostID + ",ctrl_loss_tmo=3600,reconnect_delay=5,keep_alive_tmo=15,nr_io_queues=4,dhchap_secret=" + key
	if calls := f.optionCalls(); len(calls) != 1 || calls[0] != want {
		t.Fatalf("wrote %q\nwant exactly one write of %q", calls, want)
	}
	wantNS := Namespace{
		Device: filepath.Join(f.dev, "nvme0n1"), Controller: "nvme0", NSID: 3, SizeBytes: 2097152 * 512,
		Target: tgtData, NewController: true,
	}
	if ns != wantNS {
		t.Fatalf("Connect = %+v\nwant %+v", ns, wantNS)
	}
	if got, want := ns.Identity(), "nvme:tcp:192.0.2.11:4420:"+nqnData+":ns3"; got != want {
		t.Errorf("Identity = %q, want %q", got, want)
	}
}

func TestConnectDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"minimal", Options{Target: Target{Transport: "tcp", Address: "192.0.2.11", NQN: nqnData}, Namespace: 1},
			"nqn=" + nqnData + ",transport=tcp,traddr=192.0.2.11,trsvcid=4420,ctrl_loss_tmo=1800,reconnect_delay=10"},
		{"forever, rdma, ipv6 canonical", Options{Target: Target{Transport: "rdma", Address: "2001:DB8:0::11", Port: 4421, NQN: nqnData}, Namespace: 1, CtrlLossTmo: Forever},
			"nqn=" + nqnData + ",transport=rdma,traddr=2001:db8::11,trsvcid=4421,ctrl_loss_tmo=-1,reconnect_delay=10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, false)
			f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
			ns, err := f.client().Connect(context.Background(), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if calls := f.optionCalls(); len(calls) != 1 || calls[0] != tc.want {
				t.Fatalf("wrote %q, want %q", calls, tc.want)
			}
			if ns.Target.Port == 0 {
				t.Errorf("returned target has no port: %+v", ns.Target)
			}
		})
	}
}

func TestInsecureSecretFileRefused(t *testing.T) {
	f := newFake(t, false)
	f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
	key := dhchapKey(t, 32, "00")
	o := Options{Target: tgtData, Namespace: 1, DHCHAPSecretFile: writeSecret(t, key, 0o644)}
	_, err := f.client().Connect(context.Background(), o)
	if !errors.Is(err, secret.ErrInsecure) {
		t.Fatalf("Connect with a 0644 key file: %v, want secret.ErrInsecure", err)
	}
	if !strings.Contains(err.Error(), o.DHCHAPSecretFile) {
		t.Errorf("error does not name the file: %v", err)
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("error shows the key: %v", err)
	}
	if calls := f.optionCalls(); len(calls) != 0 {
		t.Errorf("connected anyway: %q", calls)
	}
}

func TestSecretNeverInErrors(t *testing.T) {
	good := dhchapKey(t, 64, "03")
	b64 := good[len("DHHC-1:03:") : len(good)-1]
	raw, _ := base64.StdEncoding.DecodeString(b64)
	raw[0] ^= 0xff
	damaged := "DHHC-1:03:" + base64.StdEncoding.EncodeToString(raw) + ":"
	for _, tc := range []struct {
		name, key  string
		kernelErr  error
		wantInErr  string
		wantWrites int
	}{
		{"kernel refuses", good, unix.EINVAL, "invalid argument", 1},
		{"checksum", damaged, nil, "checksum", 0},
		{"not a key", "hunter2-not-a-key", nil, "not a DH-HMAC-CHAP key", 0},
		{"short key", "DHHC-1:00:" + base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!xxxx")) + ":", nil, "16 bytes", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, false)
			f.connectErr = tc.kernelErr
			o := Options{Target: tgtData, Namespace: 1, DHCHAPSecretFile: writeSecret(t, tc.key, 0o600)}
			_, err := f.client().Connect(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("Connect: %v, want an error about %q", err, tc.wantInErr)
			}
			secretPart := tc.key
			if i := strings.LastIndex(strings.TrimSuffix(tc.key, ":"), ":"); i >= 0 {
				secretPart = strings.TrimSuffix(tc.key[i+1:], ":")
			}
			if strings.Contains(err.Error(), secretPart) {
				t.Fatalf("error shows the key: %v", err)
			}
			if n := len(f.optionCalls()); n != tc.wantWrites {
				t.Errorf("%d writes to nvme-fabrics, want %d", n, tc.wantWrites)
			}
		})
	}
	t.Run("spec example key", func(t *testing.T) {
		// The example key of the NVMe base specification (as quoted in
		// the kernel's changelog): an independent check of the CRC.
		if err := checkDHCHAPKey("DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestOptionInjectionRefused(t *testing.T) {
	base := Options{Target: tgtData, Namespace: 1}
	for _, tc := range []struct {
		field string
		edit  func(*Options)
	}{
		{"nqn", func(o *Options) { o.NQN = nqnData + ",hostnqn=evil" }},
		{"nqn", func(o *Options) { o.NQN = "nqn.2026-01.x:a=b" }},
		{"nqn", func(o *Options) { o.NQN = nqnData + "\ntraddr=203.0.113.1" }},
		{"hostNQN", func(o *Options) { o.HostNQN = "nqn.2014-08.x:h,ctrl_loss_tmo=0" }},
		{"hostID", func(o *Options) { o.HostID = hostID + ",a=b" }},
		{"address", func(o *Options) { o.Address = "192.0.2.11,trsvcid=1" }},
		{"transport", func(o *Options) { o.Transport = "tcp,x=y" }},
	} {
		o := base
		tc.edit(&o)
		f := newFake(t, false)
		_, err := f.client().Connect(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: Connect = %v, want an error naming %s", o, err, tc.field)
		}
		if calls := f.optionCalls(); len(calls) != 0 {
			t.Errorf("%+v: wrote %q", o, calls)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Options{Target: tgtData, Namespace: 1}
	for _, tc := range []struct {
		edit func(*Options)
		want string // "" = valid
	}{
		{func(o *Options) {}, ""},
		{func(o *Options) { o.Port = 0 }, ""},
		{func(o *Options) { o.CtrlLossTmo = -5 * time.Second }, ""},
		{func(o *Options) { o.Address = "fe80::1%eth0" }, ""},
		{func(o *Options) { o.Namespace = 0 }, "namespace"},
		{func(o *Options) { o.Namespace = 1 << 32 }, "namespace"},
		{func(o *Options) { o.Port = 70000 }, "port"},
		{func(o *Options) { o.Transport = "fc" }, "transport"},
		{func(o *Options) { o.Transport = "" }, "transport"},
		{func(o *Options) { o.Address = "storage.example.com" }, "address"},
		{func(o *Options) { o.Address = "[2001:db8::1]" }, "address"},
		{func(o *Options) { o.NQN = "" }, "nqn"},
		{func(o *Options) { o.NQN = "nqn." + strings.Repeat("x", 220) }, "nqn"},
		{func(o *Options) { o.NQN = DiscoveryNQN }, "discovery"},
		{func(o *Options) { o.NQN = "nqn.2026-01.x:a b" }, "space"},
		{func(o *Options) { o.HostID = "not-a-uuid" }, "hostID"},
		{func(o *Options) { o.CtrlLossTmo = 1500 * time.Millisecond }, "ctrlLossTimeout"},
		{func(o *Options) { o.ReconnectDelay = -time.Second }, "reconnectDelay"},
		{func(o *Options) { o.KeepAliveTmo = time.Millisecond }, "keepAliveTimeout"},
		{func(o *Options) { o.NrIOQueues = -1 }, "nrIOQueues"},
	} {
		o := ok
		tc.edit(&o)
		err := o.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", o, err, tc.want)
		}
	}
}

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

func TestControllers(t *testing.T) {
	f := newFake(t, false)
	for range 11 {
		f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, state: "live"})
	}
	// A PCIe controller: its address is a PCI address, not key=value.
	pci := filepath.Join(f.sys, "devices/pci0000:00/0000:00:04.0/nvme/nvme11")
	attrs(t, pci, map[string]string{"transport": "pcie", "address": "0000:00:04.0", "state": "live", "subsysnqn": "nqn.2019-08.org.qemu:deadbeef", "cntlid": "0"})
	symlink(t, "../../devices/pci0000:00/0000:00:04.0/nvme/nvme11", filepath.Join(f.sys, "class/nvme/nvme11"))
	// A controller being removed while listed: no attributes left.
	mkdir(t, filepath.Join(f.sys, "class/nvme/nvme12"))

	ctrls, err := f.client().Controllers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrls) != 12 {
		t.Fatalf("%d controllers, want 12: %+v", len(ctrls), ctrls)
	}
	for i, c := range ctrls {
		if c.Instance != i {
			t.Fatalf("controller %d is %s: not in instance order", i, c.Name)
		}
	}
	tcp := ctrls[10]
	want := Controller{
		Name: "nvme10", Instance: 10, Transport: "tcp",
		Address:    Address{TrAddr: "192.0.2.11", TrSvcID: "4420"},
		RawAddress: "traddr=192.0.2.11,trsvcid=4420", SubsysNQN: nqnData, State: "live",
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100",
		HostID:  "0f0e0d0c-0b0a-0908-0706-050403020100", CntlID: 11, Subsystem: "nvme-subsys0",
	}
	if tcp != want {
		t.Errorf("nvme10 = %+v\nwant   %+v", tcp, want)
	}
	if got, ok := tcp.Target(); !ok || got.Key() != tgtData.Key() {
		t.Errorf("nvme10.Target() = %+v, %v", got, ok)
	}
	if p := ctrls[11]; p.Transport != "pcie" || p.RawAddress != "0000:00:04.0" || p.Address != (Address{}) {
		t.Errorf("pcie controller = %+v", p)
	} else if _, ok := p.Target(); ok {
		t.Error("a pcie controller has a fabrics target")
	}
}

func TestNoNVMeModules(t *testing.T) {
	c := &Client{SysRoot: t.TempDir(), DevRoot: t.TempDir()}
	ctrls, err := c.Controllers()
	if err != nil || len(ctrls) != 0 {
		t.Fatalf("Controllers without /sys/class/nvme = %v, %v", ctrls, err)
	}
	_, err = c.Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
	if !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "nvme-fabrics module") {
		t.Fatalf("Connect without /dev/nvme-fabrics = %v", err)
	}
}

func TestRescan(t *testing.T) {
	f := newFake(t, false)
	name := f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, state: "live"})
	c := f.client()
	if err := c.Rescan(name); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.sys, "class/nvme", name, "rescan_controller")); string(b) != "1" {
		t.Errorf("rescan_controller = %q, want 1", b)
	}
	for _, bad := range []string{"../nvme0", "nvme0/..", "nvme", "sda"} {
		if err := c.Rescan(bad); err == nil {
			t.Errorf("Rescan(%q) accepted", bad)
		}
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

package nvme

// The option string Connect writes to /dev/nvme-fabrics, its defaults, and what is refused before anything is written.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/secret"
)

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

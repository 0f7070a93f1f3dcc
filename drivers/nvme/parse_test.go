package nvme

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Address
		err  bool
	}{
		{"traddr=192.0.2.1,trsvcid=4420\n", Address{TrAddr: "192.0.2.1", TrSvcID: "4420"}, false},
		{"traddr=192.0.2.1,trsvcid=4420,src_addr=192.0.2.7\n", Address{TrAddr: "192.0.2.1", TrSvcID: "4420", SrcAddr: "192.0.2.7"}, false},
		{"traddr=fe80::1%eth0,trsvcid=4420,host_traddr=fe80::2,host_iface=eth0\n", Address{TrAddr: "fe80::1%eth0", TrSvcID: "4420", HostTrAddr: "fe80::2", HostIface: "eth0"}, false},
		{"traddr=nn-0x1000:pn-0x2000,host_traddr=nn-0x3000:pn-0x4000\n", Address{TrAddr: "nn-0x1000:pn-0x2000", HostTrAddr: "nn-0x3000:pn-0x4000"}, false},
		{"traddr=192.0.2.1,trsvcid=4420,future_key=x\n", Address{TrAddr: "192.0.2.1", TrSvcID: "4420"}, false},
		{"\n", Address{}, false},
		{"", Address{}, false},
		{"0000:00:04.0\n", Address{}, true},
		{"traddr=a,traddr=b", Address{}, true},
		{"traddr=a,,trsvcid=1", Address{}, true},
		{"=a", Address{}, true},
		{"TRADDR=a", Address{}, true},
		{"traddr=a\x00b", Address{}, true},
		{"traddr=a\n\n", Address{}, true},
	} {
		got, err := ParseAddress(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseAddress(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseReply(t *testing.T) {
	for _, tc := range []struct {
		in         string
		inst, cntl int
		err        bool
	}{
		{"instance=0,cntlid=1\n", 0, 1, false},
		{"instance=17,cntlid=65535", 17, 65535, false},
		{"cntlid=2,instance=3\n", 3, 2, false},
		{"instance=3,cntlid=2,tls_key=0\n", 3, 2, false},
		{"instance=3\n", 0, 0, true},
		{"cntlid=3\n", 0, 0, true},
		{"instance=-1,cntlid=0\n", 0, 0, true},
		{"instance=+1,cntlid=0\n", 0, 0, true},
		{"instance=0x1,cntlid=0\n", 0, 0, true},
		{"instance=1,cntlid=65536\n", 0, 0, true},
		{"instance=99999999999999999999,cntlid=0\n", 0, 0, true},
		{"instance=1,instance=2,cntlid=0\n", 0, 0, true},
		{"", 0, 0, true},
		{"instance= 1,cntlid=0", 0, 0, true},
	} {
		inst, cntl, err := ParseReply(tc.in)
		if (err != nil) != tc.err || inst != tc.inst || cntl != tc.cntl {
			t.Errorf("ParseReply(%q) = %d, %d, %v; want %d, %d, error %v", tc.in, inst, cntl, err, tc.inst, tc.cntl, tc.err)
		}
	}
}

func TestIdentityRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		nsid int
		want string
	}{
		{tgtData, 1, "nvme:tcp:192.0.2.11:4420:" + nqnData + ":ns1"},
		{Target{Transport: "rdma", Address: "2001:DB8::1", NQN: "nqn.2026-01.com.example:a:ns2"}, 4294967294,
			"nvme:rdma:[2001:db8::1]:4420:nqn.2026-01.com.example:a:ns2:ns4294967294"},
		{Target{Transport: "tcp", Address: "fe80::1%eth0", Port: 8009, NQN: "nqn.x"}, 7, "nvme:tcp:[fe80::1%eth0]:8009:nqn.x:ns7"},
	} {
		id := Identity(tc.t, tc.nsid)
		if id != tc.want {
			t.Errorf("Identity(%+v, %d) = %q, want %q", tc.t, tc.nsid, id, tc.want)
		}
		got, nsid, err := ParseIdentity(id)
		if err != nil || got.Key() != tc.t.Key() || nsid != tc.nsid {
			t.Errorf("ParseIdentity(%q) = %+v, %d, %v", id, got, nsid, err)
		}
	}
	for _, bad := range []string{
		"", "nvme:", "loop:tcp:1.2.3.4:4420:nqn.x:ns1", "nvme:tcp:1.2.3.4:4420:nqn.x", "nvme:tcp:1.2.3.4:4420:nqn.x:ns0",
		"nvme:tcp:[::1:4420:nqn.x:ns1", "nvme:tcp:1.2.3.4:port:nqn.x:ns1", "nvme:fc:1.2.3.4:4420:nqn.x:ns1",
		"nvme:tcp:1.2.3.4:4420:nqn,x:ns1", "nvme:tcp:1.2.3.4:4420:" + DiscoveryNQN + ":ns1",
	} {
		if tg, n, err := ParseIdentity(bad); err == nil {
			t.Errorf("ParseIdentity(%q) = %+v, %d; want an error", bad, tg, n)
		}
	}
}

// The real device: one write of the options and the reply read on the
// same descriptor. A FIFO stands in for /dev/nvme-fabrics: what is
// written comes back on the same descriptor only if both happen there.
func TestDevFabricsOneWriteReadSameFD(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nvme-fabrics")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	reply, err := DevFabrics{Path: p}.Connect(context.Background(), "instance=4,cntlid=9\n")
	if err != nil {
		t.Fatal(err)
	}
	if inst, cntl, err := ParseReply(reply); err != nil || inst != 4 || cntl != 9 {
		t.Fatalf("reply %q: %d, %d, %v", reply, inst, cntl, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (DevFabrics{Path: p}).Connect(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("Connect with a cancelled context = %v", err)
	}
	_, err = DevFabrics{Path: filepath.Join(t.TempDir(), "absent")}.Connect(context.Background(), "nqn=x")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "module") {
		t.Errorf("Connect to a missing device = %v", err)
	}
}

func FuzzParseAddress(f *testing.F) {
	f.Add("traddr=192.0.2.1,trsvcid=4420\n")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			if a != (Address{}) {
				t.Fatalf("error %v with a result %+v", err, a)
			}
			return
		}
		// What was read renders back to something that reads the same.
		var parts []string
		for _, kv := range [][2]string{{"traddr", a.TrAddr}, {"trsvcid", a.TrSvcID}, {"host_traddr", a.HostTrAddr}, {"host_iface", a.HostIface}, {"src_addr", a.SrcAddr}} {
			if kv[1] != "" {
				parts = append(parts, kv[0]+"="+kv[1])
			}
			if strings.ContainsAny(kv[1], ",\n") {
				t.Fatalf("%s value %q holds a separator", kv[0], kv[1])
			}
		}
		again, err := ParseAddress(strings.Join(parts, ",") + "\n")
		if err != nil || again != a {
			t.Fatalf("re-read of %+v = %+v, %v", a, again, err)
		}
	})
}

func FuzzParseReply(f *testing.F) {
	f.Add("instance=0,cntlid=1\n")
	f.Fuzz(func(t *testing.T, s string) {
		inst, cntl, err := ParseReply(s)
		if err != nil {
			return
		}
		if inst < 0 || cntl < 0 || cntl > 0xffff {
			t.Fatalf("ParseReply(%q) = %d, %d", s, inst, cntl)
		}
		i2, c2, err := ParseReply(fmt.Sprintf("instance=%d,cntlid=%d\n", inst, cntl))
		if err != nil || i2 != inst || c2 != cntl {
			t.Fatalf("re-read of %d,%d = %d,%d,%v", inst, cntl, i2, c2, err)
		}
	})
}

func FuzzParseIdentity(f *testing.F) {
	f.Add("nvme:tcp:192.0.2.11:4420:nqn.2026-01.com.example:data:ns1")
	f.Fuzz(func(t *testing.T, s string) {
		tg, nsid, err := ParseIdentity(s)
		if err != nil {
			return
		}
		if err := (Options{Target: tg, Namespace: nsid}).Validate(); err != nil {
			t.Fatalf("ParseIdentity(%q) accepted an invalid target: %v", s, err)
		}
		id := Identity(tg, nsid)
		t2, n2, err := ParseIdentity(id)
		if err != nil || t2.Key() != tg.Key() || n2 != nsid || Identity(t2, n2) != id {
			t.Fatalf("round trip of %q via %q: %+v, %d, %v", s, id, t2, n2, err)
		}
	})
}

package iscsi

// Sessions and disks read from sysfs, a rescan, and sessions nobody wants.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTargetPortalsAndNames(t *testing.T) {
	for _, c := range []struct{ portal, key string }{
		{"127.0.0.1", iqnData + "@127.0.0.1:3260"},
		{"127.0.0.1:3261", iqnData + "@127.0.0.1:3261"},
		{"::ffff:192.0.2.1", iqnData + "@192.0.2.1:3260"},
		{"[2001:db8::1]:3260", iqnData + "@[2001:db8::1]:3260"},
		{"[2001:DB8:0::1]", iqnData + "@[2001:db8::1]:3260"},
	} {
		tg := Target{Portal: c.portal, IQN: iqnData}
		if err := tg.Validate(); err != nil || tg.Key() != c.key {
			t.Errorf("%q: key %q, err %v; want %q", c.portal, tg.Key(), err, c.key)
		}
	}
	if got := Identity(tData, 3); got != "iscsi:iqn.2024-01.io.example:data@127.0.0.1:3260:lun3" {
		t.Errorf("Identity = %q", got)
	}
	for _, c := range []struct {
		tg   Target
		want string
	}{
		{Target{Portal: "storage.example", IQN: iqnData}, "host names are not accepted"},
		{Target{Portal: "10.0.0.1:0", IQN: iqnData}, "port 0"},
		{Target{Portal: "", IQN: iqnData}, "portal is empty"},
		{Target{Portal: "10.0.0.1", IQN: "iqn.2024-01.io.example/../../etc"}, `character '/'`},
		{Target{Portal: "10.0.0.1", IQN: "iqn.2024-01.io.example: data"}, `character ' '`},
		{Target{Portal: "10.0.0.1", IQN: "data"}, `must start with "iqn."`},
		{Target{Portal: "10.0.0.1", IQN: "iqn." + strings.Repeat("a", 220)}, "longer than 223"},
	} {
		if err := c.tg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.tg, err, c.want)
		}
	}
	if !(Target{Portal: "127.0.0.1:3260", IQN: iqnData}).same(tData) || tData.same(Target{Portal: "127.0.0.1:3261", IQN: iqnData}) {
		t.Error("same() does not compare canonical portals")
	}
}

func TestSessionsAndFindFromSysfs(t *testing.T) {
	e := newEnv(t)
	if ss, err := e.c.Sessions(); err != nil || len(ss) != 0 {
		t.Fatalf("empty sysfs: %v, %v", ss, err)
	}
	s1 := e.k.addSession(iqnData, apLo, "default", "iqn.1993-08.org.debian:01:host")
	e.k.addLUN(s1, 0, 2048)
	sdc := e.k.addLUN(s1, 1, 4096)
	v6 := netip.MustParseAddrPort("[2001:db8::7]:3260")
	s2 := e.k.addSession(iqnLogs, v6, "volumed-x", "iqn.2024-01.io.example:other")
	e.k.addLUN(s2, 0, 8)

	ss, err := e.c.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	want := []Session{
		{ID: 1, Target: Target{Portal: "127.0.0.1:3260", IQN: iqnData}, TPGT: 1, Iface: "default", InitiatorName: "iqn.1993-08.org.debian:01:host", State: "LOGGED_IN", ReplacementTimeout: 120 * time.Second, Host: 2},
		{ID: 2, Target: Target{Portal: "[2001:db8::7]:3260", IQN: iqnLogs}, TPGT: 1, Iface: "volumed-x", InitiatorName: "iqn.2024-01.io.example:other", State: "LOGGED_IN", ReplacementTimeout: 120 * time.Second, Host: 3},
	}
	if !slices.Equal(ss, want) {
		t.Fatalf("Sessions:\n got %+v\nwant %+v", ss, want)
	}

	d, ok, err := e.c.Find(tData, 1)
	if err != nil || !ok {
		t.Fatalf("Find LUN 1: %v %v", ok, err)
	}
	if d.Device != filepath.Join(e.k.dev, sdc) || d.SizeBytes != 4096*512 || d.HCTL != "2:0:0:1" || d.SessionID != 1 || d.LUN != 1 || d.Target != want[0].Target {
		t.Fatalf("Find LUN 1 = %+v", d)
	}
	if _, ok, _ := e.c.Find(tData, 7); ok {
		t.Fatal("found a LUN the session does not have")
	}
	if _, ok, _ := e.c.Find(Target{Portal: "[2001:db8:0::7]", IQN: iqnLogs}, 0); !ok {
		t.Fatal("IPv6 target not found under another spelling of its portal")
	}
	if _, ok, _ := e.c.Find(Target{Portal: "127.0.0.1", IQN: iqnLogs}, 0); ok {
		t.Fatal("found a LUN through another target's session")
	}

	// The /dev node must exist and be the device sysfs names.
	must(t, os.Remove(d.Device))
	if _, ok, _ := e.c.Find(tData, 1); ok {
		t.Fatal("found a LUN whose /dev node is missing")
	}
	e.k.setDev(s1, 1, fakeMajor, 16)                                                                // sysfs and /dev agree again
	writeFile(t, filepath.Join(e.k.blockDir(s1, 1), "dev"), fmt.Sprintf("%d:%d\n", fakeMajor, 200)) // sysfs moves on
	if _, ok, _ := e.c.Find(tData, 1); ok {
		t.Fatal("accepted a stale /dev node for another device")
	}
}

func TestRescan(t *testing.T) {
	e := newEnv(t)
	if err := e.c.Rescan(context.Background(), tData); !errors.Is(err, ErrNoSession) {
		t.Fatalf("err = %v, want ErrNoSession", err)
	}
	sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
	e.k.addSession(iqnLogs, apLo, "default", "iqn.x:host")
	if err := e.c.Rescan(context.Background(), tData); err != nil {
		t.Fatal(err)
	}
	onlyCalls(t, e.f, []string{"-m", "session", "-r", fmt.Sprint(sid), "--rescan"})
}

func TestOrphans(t *testing.T) {
	a := Target{Portal: "10.0.0.1:3260", IQN: iqnData}
	b := Target{Portal: "10.0.0.2:3260", IQN: iqnLogs}
	admin := Target{Portal: "10.0.0.3:3260", IQN: "iqn.2024-01.io.example:admin"}
	sessions := []Session{{ID: 1, Target: a}, {ID: 2, Target: b}, {ID: 3, Target: admin}, {ID: 4, Target: b}}
	got := Orphans(sessions, []Target{{Portal: "10.0.0.1", IQN: iqnData}, b}, []Target{a})
	if !slices.Equal(got, []Target{b}) {
		t.Fatalf("Orphans = %v, want only %v (the admin's session is not ours, a is still wanted)", got, b)
	}
}

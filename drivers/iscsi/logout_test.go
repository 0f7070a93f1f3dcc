package iscsi

// Logout: only the target asked for, and never while a disk of it is in use.

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
)

func TestLogoutOnlyThatTarget(t *testing.T) {
	e := newEnv(t)
	other := netip.MustParseAddrPort("127.0.0.1:3261")
	for _, tg := range []Target{tData, {Portal: "127.0.0.1", IQN: iqnLogs}, {Portal: other.String(), IQN: iqnData}} {
		e.serve(tg, &fakeTarget{luns: map[int]int64{0: 8}})
		if _, err := e.c.Login(context.Background(), Options{Target: tg}); err != nil {
			t.Fatal(err)
		}
	}
	e.f.resetCalls()
	if err := e.c.Logout(context.Background(), Target{Portal: "127.0.0.1:3260", IQN: iqnData}); err != nil {
		t.Fatal(err)
	}
	onlyCalls(t, e.f,
		[]string{"-m", "session", "-r", "1", "--logout"},
		[]string{"-m", "node", "-T", iqnData, "-p", "127.0.0.1:3260", "-o", "delete"})
	if ids := e.k.sessionIDs(); !slices.Equal(ids, []int{2, 3}) {
		t.Fatalf("sessions left %v, want 2 and 3", ids)
	}
	if _, err := os.Stat(filepath.Join(e.f.db, iqnData, "127.0.0.1,3260")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("node record of the logged out target: %v", err)
	}
	for _, p := range []string{filepath.Join(iqnData, "127.0.0.1,3261"), filepath.Join(iqnLogs, "127.0.0.1,3260")} {
		if _, err := os.Stat(filepath.Join(e.f.db, p)); err != nil {
			t.Fatalf("other target's record: %v", err)
		}
	}
	// Nothing left to do is not an error.
	if err := e.c.Logout(context.Background(), tData); err != nil {
		t.Fatalf("second logout: %v", err)
	}
}

func TestLogoutRefusesDiskInUse(t *testing.T) {
	t.Run("held", func(t *testing.T) {
		e := newEnv(t)
		sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
		e.k.addLUN(sid, 0, 8)
		must(t, os.Mkdir(filepath.Join(e.k.blockDir(sid, 0), "holders", "dm-0"), 0o755))
		err := e.c.Logout(context.Background(), tData)
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "dm-0") {
			t.Fatalf("err = %v, want ErrBusy naming dm-0", err)
		}
		onlyCalls(t, e.f) // nothing may run on a busy target
	})
	t.Run("mounted", func(t *testing.T) {
		mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter("/"))
		if err != nil || len(mounts) == 0 {
			t.Fatalf("mountinfo for /: %v", err)
		}
		e := newEnv(t)
		sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
		e.k.addLUN(sid, 0, 8)
		// Give the fixture disk the device number of the mounted root.
		e.k.setDev(sid, 0, uint32(mounts[0].Major), uint32(mounts[0].Minor))
		err = e.c.Logout(context.Background(), tData)
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "mounted at /") {
			t.Fatalf("err = %v, want ErrBusy: mounted at /", err)
		}
		if ids := e.k.sessionIDs(); len(ids) != 1 {
			t.Fatal("logged out a mounted disk")
		}
	})
}

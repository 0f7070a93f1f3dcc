package iscsi

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testtool"
)

// mountedElsewhere mounts a fresh ext4 loop device in a mount namespace
// of its own (a child that holds it until the test ends) and returns the
// device's numbers: in this namespace nothing shows it mounted.
func mountedElsewhere(t *testing.T) (major, minor uint32) {
	t.Helper()
	testtool.Need(t, "util-linux", "losetup")
	testtool.Need(t, "e2fsprogs", "mkfs.ext4")
	dev := testtool.Losetup(t, testtool.Image(t, 32<<20))
	if out, err := exec.Command("mkfs.ext4", "-q", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	testtool.MountElsewhere(t, dev)
	var st unix.Stat_t
	must(t, unix.Stat(dev, &st))
	return unix.Major(st.Rdev), unix.Minor(st.Rdev)
}

// A LUN mounted in another mount namespace (a container's, a service's
// with PrivateMounts=) is in use: the logout is refused, by the
// exclusive open the kernel refuses, though this namespace's mount table
// shows no such mount.
func TestLogoutRefusesDiskMountedInAnotherNamespace(t *testing.T) {
	major, minor := mountedElsewhere(t)
	e := newEnv(t)
	sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
	e.k.addLUN(sid, 0, 8)
	e.k.setDev(sid, 0, major, minor)
	err := e.c.Logout(context.Background(), tData)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "another mount namespace") {
		t.Fatalf("err = %v, want ErrBusy: mounted in another mount namespace", err)
	}
	if ids := e.k.sessionIDs(); len(ids) != 1 {
		t.Fatal("logged out a disk mounted in another namespace")
	}
	onlyCalls(t, e.f) // nothing may run on a busy target
}

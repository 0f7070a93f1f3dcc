package inuse

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

func TestMain(m *testing.M) { testns.Main(m) }

func TestBusy(t *testing.T) {
	tests := []struct {
		name string
		u    Use
		busy bool
		says string
	}{
		{"free", Use{Device: "/dev/loop1"}, false, ""},
		{"gone", Use{Device: "/dev/loop1", Gone: true}, false, ""},
		{"held by dm through a partition", Use{Device: "/dev/sda", Holders: []string{"dm-0 (of sda1)"}}, true, "held by dm-0 (of sda1)"},
		{"mounted here", Use{Device: "/dev/sda", Claimed: true, Mounts: []string{"/srv"}}, true, "mounted at /srv"},
		{"claimed, no mount seen here", Use{Device: "/dev/sda", Claimed: true}, true, "another mount namespace"},
	}
	for _, tt := range tests {
		busy, why := Busy(tt.u)
		if busy != tt.busy || !strings.Contains(why, tt.says) {
			t.Errorf("%s: Busy = %v, %q; want %v, %q", tt.name, busy, why, tt.busy, tt.says)
		}
	}
}

func loopDevice(t *testing.T) string {
	t.Helper()
	testtool.Need(t, "util-linux e2fsprogs", "losetup", "mkfs.ext4")
	img := testtool.Image(t, 32<<20)
	return testtool.Losetup(t, img)
}

// On the real kernel: a free device is claimed (and nobody else can
// claim it meanwhile); a device open exclusively elsewhere, or mounted,
// is in use, and the mount is named.
func TestClaimOnTheKernel(t *testing.T) {
	dev := loopDevice(t)
	f, u, err := Claim("", dev)
	if err != nil || f == nil {
		t.Fatalf("Claim of a free device: %v, %+v, %v", f, u, err)
	}
	if busy, _ := Busy(u); busy {
		t.Errorf("a free device is busy: %+v", u)
	}
	u2, err := Check("", dev)
	if busy, why := Busy(u2); err != nil || !busy || !strings.Contains(why, "open exclusively") {
		t.Errorf("while claimed: %+v, %v (%s), want busy", u2, err, why)
	}
	f.Close()

	if out, err := exec.Command("mkfs.ext4", "-q", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	mnt := t.TempDir()
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }()
	u, err = Check("", dev)
	if busy, why := Busy(u); err != nil || !busy || !strings.Contains(why, "mounted at "+mnt) {
		t.Errorf("mounted: %+v, %v (%s)", u, err, why)
	}
}

func TestHolder(t *testing.T) {
	tests := []struct {
		kernel string
		dm     DM
		part   string
		want   string
	}{
		{"md127", DM{}, "", "md127"},
		{"md127", DM{}, "sdb1", "md127 (of sdb1)"},
		{"dm-0", DM{"vgdata-lv0", "LVM-Aq1b2c3dAq1b2c3dAq1b2c3dAq1b2c3dAq1b2c3dAq1b2c3dAq1b2c3d"}, "", "dm-0 (LVM vgdata-lv0)"},
		{"dm-1", DM{"secret", "CRYPT-LUKS2-0123456789abcdef0123456789abcdef-secret"}, "sdb2", "dm-1 (LUKS secret, of sdb2)"},
		{"dm-2", DM{"plain", "CRYPT-PLAIN-plain"}, "", "dm-2 (dm-crypt plain)"},
		{"dm-3", DM{"mpatha", "mpath-3600a0b80"}, "", "dm-3 (multipath mpatha)"},
		{"dm-4", DM{"hand-made", ""}, "", "dm-4 (dm hand-made)"},
	}
	for _, tt := range tests {
		if got := Holder(tt.kernel, tt.dm, tt.part); got != tt.want {
			t.Errorf("Holder(%q, %+v, %q) = %q, want %q", tt.kernel, tt.dm, tt.part, got, tt.want)
		}
	}
}

// A device a dm device holds (here through a partition) is named with
// the dm name an operator knows (`dmsetup ls`, `lvs`), not dm-N alone,
// read from the sysfs tree as the kernel lays it out (holders/dm-N is a
// link to the dm device's directory).
func TestClaimNamesDMHolders(t *testing.T) {
	sys := t.TempDir()
	dm := filepath.Join(sys, "devices/virtual/block/dm-0")
	disk := filepath.Join(sys, "devices/pci/block/vdb")
	for _, d := range []string{dm + "/dm", disk + "/holders", disk + "/vdb1/holders"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, v := range map[string]string{
		dm + "/dm/name": "vgwipe-lv0\n", dm + "/dm/uuid": "LVM-xyz\n", disk + "/dev": "254:16\n",
		disk + "/vdb1/partition": "1\n", disk + "/vdb1/dev": "254:17\n",
	} {
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(dm, disk+"/vdb1/holders/dm-0"); err != nil {
		t.Fatal(err)
	}
	f, u, err := ClaimAt(disk, "/dev/vdb")
	if f != nil {
		f.Close()
	}
	busy, why := Busy(u)
	if err != nil || !busy || !strings.Contains(why, "held by dm-0 (LVM vgwipe-lv0, of vdb1)") {
		t.Errorf("ClaimAt = %+v, %v: %q; want held by dm-0 (LVM vgwipe-lv0, of vdb1)", u, err, why)
	}
}

// A device mounted only in another mount namespace is in use: the
// exclusive open is refused though this namespace shows no mount.
func TestMountedInAnotherNamespace(t *testing.T) {
	dev := loopDevice(t)
	if out, err := exec.Command("mkfs.ext4", "-q", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	testtool.MountElsewhere(t, dev)
	f, u, err := Claim("", dev)
	if f != nil {
		f.Close()
	}
	busy, why := Busy(u)
	if err != nil || f != nil || !busy || !u.Claimed || len(u.Mounts) != 0 || !strings.Contains(why, "another mount namespace") {
		t.Errorf("Claim = %+v, %v (%s); want busy, claimed elsewhere, no mount here", u, err, why)
	}
}

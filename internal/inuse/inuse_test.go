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
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
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

package loop

// Detach: refused for another identity, busy while mounted or held by others.

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDetachRefusesOtherIdentity(t *testing.T) {
	dir := t.TempDir()
	a := attachT(t, Options{File: newImage(t, dir, "a.img", 4*mib)})
	bDev, bIno, err := FileIdentity(newImage(t, dir, "b.img", 4*mib))
	if err != nil {
		t.Fatal(err)
	}
	stale := *a
	stale.BackingDev, stale.BackingIno = bDev, bIno
	if err := Detach(context.Background(), stale); !errors.Is(err, ErrIdentity) {
		t.Fatalf("Detach with B's identity on A's device: %v, want ErrIdentity", err)
	}
	if !boundTo(t, a.Number, *a) {
		t.Fatalf("%s no longer backs A after a refused Detach", a.Path)
	}
}

func TestDetachMountedIsBusy(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Fatal("mkfs.ext4 is required:", err)
	}
	d := attachT(t, Options{File: newImage(t, t.TempDir(), "fs.img", 32*mib)})
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", d.Path).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	mnt := t.TempDir()
	if err := unix.Mount(d.Path, mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mount: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			if err := unix.Unmount(mnt, 0); err != nil {
				t.Errorf("unmount %s: %v", mnt, err)
			}
		}
	})

	if err := Detach(context.Background(), *d); !errors.Is(err, ErrBusy) {
		t.Fatalf("Detach of a mounted device: %v, want ErrBusy", err)
	}
	if !boundTo(t, d.Number, *d) {
		t.Fatal("mounted device was detached")
	}
	if af := readSys(t, d.Number, "loop", "autoclear"); af != "0" {
		t.Errorf("autoclear = %s after refused Detach, want 0", af)
	}

	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if err := Detach(context.Background(), *d); err != nil {
		t.Fatalf("Detach after unmount: %v", err)
	}
	if boundTo(t, d.Number, *d) {
		t.Fatal("still attached after Detach")
	}
}

// A device someone else has open cannot be detached now; Detach must say
// so and leave it usable instead of arming a delayed autoclear.
func TestDetachHeldByOthers(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags int
	}{
		{"open", unix.O_RDONLY},
		{"exclusive", unix.O_RDONLY | unix.O_EXCL}, // as mkfs or fsck would
	} {
		t.Run(c.name, func(t *testing.T) {
			d := attachT(t, Options{File: newImage(t, t.TempDir(), "h.img", 4*mib)})
			fd, err := unix.Open(d.Path, c.flags|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			held := true
			t.Cleanup(func() {
				if held {
					unix.Close(fd)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if err := Detach(ctx, *d); !errors.Is(err, ErrBusy) {
				t.Fatalf("Detach while held: %v, want ErrBusy", err)
			}
			if !boundTo(t, d.Number, *d) {
				t.Fatal("device was detached while held")
			}
			if af := readSys(t, d.Number, "loop", "autoclear"); af != "0" {
				t.Errorf("autoclear = %s after refused Detach, want 0", af)
			}

			unix.Close(fd)
			held = false
			if err := Detach(context.Background(), *d); err != nil {
				t.Fatalf("Detach once released: %v", err)
			}
			if boundTo(t, d.Number, *d) {
				t.Fatal("still attached after Detach")
			}
		})
	}
}

package blockfs

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testtool"
)

func losetup(t *testing.T, img string) string {
	t.Helper()
	need(t, "losetup")
	return testtool.Losetup(t, img)
}

func mountAt(t *testing.T, dev, fstype string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount(dev, dir, fstype, 0, ""); err != nil {
		t.Fatalf("mount %s on %s: %v", dev, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func fsBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize
}

func TestGrow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct {
		fstype string
		tools  []string
		size   int64
	}{
		{"ext4", []string{"mkfs.ext4", "resize2fs"}, 64 * mib},
		{"xfs", []string{"mkfs.xfs", "xfs_growfs"}, 320 * mib},
		{"btrfs", []string{"mkfs.btrfs", "btrfs"}, 256 * mib},
	} {
		t.Run(c.fstype, func(t *testing.T) {
			need(t, c.tools...)
			img := image(t, "grow.img", c.size)
			if err := Mkfs(ctx, img, c.fstype, "", nil); err != nil {
				t.Fatal(err)
			}
			dev := losetup(t, img)

			// ProbeDevice on a real block device (BLKGETSIZE64 path).
			f, err := os.Open(dev)
			if err != nil {
				t.Fatal(err)
			}
			size, err := deviceSize(f)
			f.Close()
			if err != nil || size != c.size {
				t.Fatalf("deviceSize(%s) = %d, %v; want %d", dev, size, err, c.size)
			}
			sigs, err := ProbeDevice(ctx, dev)
			if err != nil {
				t.Fatal(err)
			}
			if got := types(sigs, SourceVolumed); !slices.Equal(got, []string{c.fstype}) {
				t.Fatalf("ProbeDevice(%s) volumed types = %v", dev, got)
			}
			if have("blkid") && !slices.Contains(types(sigs, SourceBlkid), c.fstype) {
				t.Fatalf("ProbeDevice(%s) blkid types = %v", dev, types(sigs, SourceBlkid))
			}

			if c.fstype == "ext4" && !hasCap(t, unix.CAP_SYS_RESOURCE) {
				// The kernel refuses EXT4_IOC_RESIZE_FS without it; all
				// that can be checked here is that Grow runs resize2fs
				// right, on the unmounted device.
				t.Logf("no CAP_SYS_RESOURCE on this machine: ext4 grown offline instead of online")
				if err := os.Truncate(img, 2*c.size); err != nil {
					t.Fatal(err)
				}
				runCmd(t, "", "losetup", "-c", dev)
				if err := Grow(ctx, c.fstype, dev, ""); err != nil {
					t.Fatal(err)
				}
				if after := fsBytes(t, mountAt(t, dev, c.fstype)); after <= c.size {
					t.Fatalf("filesystem is %d bytes after Grow; the device was %d and is now %d", after, c.size, 2*c.size)
				}
				return
			}
			mnt := mountAt(t, dev, c.fstype)
			before := fsBytes(t, mnt)
			if err := os.Truncate(img, 2*c.size); err != nil {
				t.Fatal(err)
			}
			runCmd(t, "", "losetup", "-c", dev)
			if err := Grow(ctx, c.fstype, dev, mnt); err != nil {
				t.Fatal(err)
			}
			after := fsBytes(t, mnt)
			if after <= c.size {
				t.Fatalf("filesystem is %d bytes after Grow (was %d); the device was %d and is now %d", after, before, c.size, 2*c.size)
			}
		})
	}
	t.Run("unsupported", func(t *testing.T) {
		if err := Grow(ctx, "vfat", "/dev/null", t.TempDir()); err == nil {
			t.Fatal("Grow vfat succeeded")
		}
	})
}

// hasCap reports whether the test process has capability c in its
// effective set.
func hasCap(t *testing.T, c int) bool {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			var mask uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &mask); err != nil {
				t.Fatal(err)
			}
			return mask&(1<<uint(c)) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

package filesystem_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/filesystem"
	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

func TestMain(m *testing.M) { testns.Main(m) }

// The registry is held to the tools themselves: each type's mkfs, with
// volumed's arguments and a UUID, makes a filesystem blkid names, with
// that UUID, on an image of its minimum size, and refuses an image 1 KiB
// smaller; its read-only checker finds the new filesystem clean.
func TestRegistryAgainstTheTools(t *testing.T) {
	const uuid = "0b6b1c4e-3f51-4c1e-9a51-2a1d1c0e7a11"
	testtool.Need(t, "util-linux", "blkid")
	for _, ty := range filesystem.All() {
		t.Run(ty.Name, func(t *testing.T) {
			testtool.Need(t, ty.Package, ty.Mkfs.Program, ty.Check.Program)
			mkfs := func(size int64) (string, error) {
				img := testtool.Image(t, size)
				out, err := exec.Command(ty.Mkfs.Program, ty.Mkfs.Command(img, uuid, false, nil)...).CombinedOutput()
				if err != nil {
					return img, fmt.Errorf("%v: %s", err, out)
				}
				return img, nil
			}
			if _, err := mkfs(ty.MinSize - 1<<10); err == nil {
				t.Errorf("%s took %d bytes, 1 KiB under MinSize %d: MinSize is too large", ty.Mkfs.Program, ty.MinSize-1<<10, ty.MinSize)
			}
			img, err := mkfs(ty.MinSize)
			if err != nil {
				t.Fatalf("%s at MinSize %d: %v", ty.Mkfs.Program, ty.MinSize, err)
			}
			out, err := exec.Command("blkid", "-p", "-o", "export", img).Output()
			if err != nil {
				t.Fatalf("blkid: %v", err)
			}
			if s := string(out); !strings.Contains(s, "TYPE="+ty.Name+"\n") || !strings.Contains(s, "UUID="+uuid+"\n") {
				t.Errorf("blkid of the new %s:\n%s", ty.Name, s)
			}
			if out, err := exec.Command(ty.Check.Program, ty.Check.Command(img)...).CombinedOutput(); err != nil {
				t.Errorf("%s of a new filesystem: %v: %s", ty.Check.Program, err, out)
			}
		})
	}
}

// The error count is read where the kernel keeps it: under the kernel's
// name of the device, which is not the node's name for a device-mapper
// node, so a node named otherwise is followed to it; a type without
// counters and a device with nothing mounted count none.
func TestErrorCount(t *testing.T) {
	testtool.Need(t, "util-linux", "losetup")
	img := testtool.Image(t, 1<<20)
	dev := testtool.Losetup(t, img)
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	// A node of another name (as /dev/mapper/x is of dm-N) and a sysfs
	// tree of the kernel's shape.
	node := filepath.Join(t.TempDir(), "volumed-data")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	kernel := filepath.Join(root, "devices", "virtual", "block", "kname0")
	numbers := filepath.Join(root, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	for _, d := range []string{kernel, filepath.Dir(numbers), filepath.Join(root, "fs", "ext4", "kname0")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(kernel, numbers); err != nil {
		t.Fatal(err)
	}
	counter := filepath.Join(root, "fs", "ext4", "kname0", "errors_count")
	if err := os.WriteFile(counter, []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ext4, _ := filesystem.Lookup("ext4")
	xfs, _ := filesystem.Lookup("xfs")
	if n, path, err := ext4.ErrorCount(root, node); err != nil || n != 3 || path != counter {
		t.Errorf("ext4 ErrorCount = %d, %q, %v; want 3 from %s", n, path, err, counter)
	}
	if n, _, err := xfs.ErrorCount(root, node); err != nil || n != 0 {
		t.Errorf("xfs ErrorCount = %d, %v; xfs keeps no count", n, err)
	}
	if err := os.Remove(counter); err != nil {
		t.Fatal(err)
	}
	if n, _, err := ext4.ErrorCount(root, node); err != nil || n != 0 {
		t.Errorf("ext4 ErrorCount with nothing mounted = %d, %v; want 0", n, err)
	}
	if err := os.WriteFile(counter, []byte("many\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ext4.ErrorCount(root, node); err == nil || !strings.Contains(err.Error(), "ext4 error count of "+node) {
		t.Errorf("ext4 ErrorCount of a bad count: %v", err)
	}
	testErrorCounts(t, root, node, counter)
}

// ErrorCounts answers for each device in its order, what ErrorCount
// would: a device whose kernel name the type's directory does not list
// (nothing of the type mounted from it) counts none, and a bad count is
// that device's error alone.
func testErrorCounts(t *testing.T, root, node, counter string) {
	ext4, _ := filesystem.Lookup("ext4")
	xfs, _ := filesystem.Lookup("xfs")
	other := filepath.Join(t.TempDir(), "loop-unmounted") // not a node: taken as named
	if err := os.WriteFile(counter, []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := ext4.ErrorCounts(root, []string{other, node, other})
	if len(got) != 3 || got[1].N != 3 || got[1].Path != counter || got[1].FS != "ext4" || got[1].Err != nil {
		t.Fatalf("ErrorCounts = %+v; want 3 from %s second", got, counter)
	}
	for _, i := range []int{0, 2} {
		if got[i].N != 0 || got[i].Err != nil {
			t.Errorf("ErrorCounts of a device with nothing mounted = %+v, want 0", got[i])
		}
	}
	if got := xfs.ErrorCounts(root, []string{node}); got[0].N != 0 || got[0].Err != nil {
		t.Errorf("xfs ErrorCounts = %+v; xfs keeps no count", got[0])
	}
	if err := os.WriteFile(counter, []byte("many\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got = ext4.ErrorCounts(root, []string{node, other})
	if got[0].Err == nil || !strings.Contains(got[0].Err.Error(), "ext4 error count of "+node) || got[1].Err != nil {
		t.Errorf("ErrorCounts with a bad count: %+v", got)
	}
	if err := os.RemoveAll(filepath.Join(root, "fs", "ext4")); err != nil {
		t.Fatal(err)
	}
	if got := ext4.ErrorCounts(root, []string{node}); got[0].N != 0 || got[0].Err != nil {
		t.Errorf("ErrorCounts with no ext4 mounted at all = %+v, want 0", got[0])
	}
}

// On the real kernel, a mounted ext4's count is where ErrorCount reads
// it, and is 0 on a new filesystem.
func TestErrorCountOfAMountedExt4(t *testing.T) {
	testtool.Need(t, "util-linux", "losetup")
	testtool.Need(t, "e2fsprogs", "mkfs.ext4")
	img := testtool.Image(t, 8<<20)
	dev := testtool.Losetup(t, img)
	if out, err := exec.Command("mkfs.ext4", "-q", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	mnt := t.TempDir()
	if err := unix.Mount(dev, mnt, "ext4", 0, "errors=continue"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }()
	ext4, _ := filesystem.Lookup("ext4")
	n, path, err := ext4.ErrorCount("", dev)
	if _, serr := os.Stat(path); err != nil || n != 0 || serr != nil {
		t.Errorf("ErrorCount of a new ext4 = %d, %q (%v), %v; want 0 from an attribute that exists", n, path, serr, err)
	}
	// An error the kernel records (errors=continue keeps it mounted
	// read-write) is what both read, the batch from its one listing.
	trigger := filepath.Join(filepath.Dir(path), "trigger_fs_error")
	if err := os.WriteFile(trigger, []byte("volumed test\n"), 0o200); err != nil {
		t.Fatalf("force an ext4 error (kernel without %s?): %v", trigger, err)
	}
	// With errors=continue the kernel writes the count into the
	// superblock from a worker, a moment after the error.
	deadline := time.Now().Add(30 * time.Second)
	for n, _, err := ext4.ErrorCount("", dev); n < 1; n, _, err = ext4.ErrorCount("", dev) {
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("ErrorCount after a forced error = %d, %v; want at least 1", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := ext4.ErrorCounts("", []string{dev}); got[0].N < 1 || got[0].Path != path || got[0].Err != nil {
		t.Errorf("ErrorCounts after a forced error = %+v; want at least 1 from %s", got[0], path)
	}
}

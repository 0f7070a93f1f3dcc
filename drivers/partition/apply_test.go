package partition

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

func TestMain(m *testing.M) { testns.Main(m) }

// loopDisk makes a sparse image of 64 MiB and a loop device on it
// that scans partitions (losetup -P, LO_FLAGS_PARTSCAN) with more losetup
// options, detached when the test ends, failed or not.
func loopDisk(t *testing.T, options ...string) (dev, img string) {
	t.Helper()
	img = filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 * mib); err != nil {
		t.Fatal(err)
	}
	f.Close()
	testtool.Need(t, "Debian: gdisk, fdisk, e2fsprogs, util-linux", "sgdisk", "sfdisk", "mkfs.ext4", "blkid", "losetup")
	return testtool.Losetup(t, img, append([]string{"-P"}, options...)...), img
}

func hashFile(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// sysPart reads partition n of the loop disk dev from sysfs: start and
// size in bytes; ok false when the kernel has no such partition.
func sysPart(t *testing.T, dev string, n int) (start, size int64, ok bool) {
	t.Helper()
	base := filepath.Base(dev)
	dir := fmt.Sprintf("/sys/block/%s/%sp%d", base, base, n)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return 0, 0, false
	}
	s, err1 := readInt(dir + "/start")
	z, err2 := readInt(dir + "/size")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return s * 512, z * 512, true
}

func waitNode(t *testing.T, p string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeDevice != 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", p)
}

func TestApplyBlankDiskThenNothing(t *testing.T) {
	dev, img := loopDisk(t)
	wants := []Want{{Label: "rest", Grow: true}, {Label: "data", Size: 16 * mib}}
	r, err := Apply(context.Background(), dev, wants)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Wrote || !slices.Equal(r.Told, []string{"add 2", "add 1"}) || len(r.Partitions) != 2 {
		t.Fatalf("Apply = %+v", r)
	}
	// data is first on the disk, at 1 MiB; rest takes what is left up
	// to the backup table (33 sectors at the end).
	lastByte := int64(64*mib - 34*512)
	for _, c := range []struct {
		n           int
		label       string
		start, size int64
	}{{1, "data", mib, 16 * mib}, {2, "rest", 17 * mib, lastByte + 512 - 17*mib}} {
		start, size, ok := sysPart(t, dev, c.n)
		if !ok || start != c.start || size != c.size {
			t.Errorf("kernel partition %d: %d+%d (%v), want %d+%d", c.n, start, size, ok, c.start, c.size)
		}
		p := r.Partitions[slices.IndexFunc(r.Partitions, func(p Partition) bool { return p.Label == c.label })]
		if want := fmt.Sprintf("%sp%d", dev, c.n); p.Device != want || p.Number != c.n || p.Start != c.start || p.Size != c.size || len(p.GUID) != 36 {
			t.Errorf("partition %+v, want %s", p, want)
		}
		waitNode(t, p.Device)
	}
	if out := run(t, "sgdisk", "-v", dev); !strings.Contains(out, "No problems found") {
		t.Errorf("sgdisk -v: %s", out)
	}
	if out := run(t, "blkid", "-p", "-o", "export", dev+"p1"); !strings.Contains(out, "PART_ENTRY_NAME=data") {
		t.Errorf("blkid of p1: %s", out)
	}

	before := hashFile(t, img)
	r, err = Apply(context.Background(), dev, wants)
	if err != nil || r.Wrote || len(r.Told) != 0 || len(r.Partitions) != 2 {
		t.Fatalf("second Apply = %+v, %v; want nothing done", r, err)
	}
	for _, a := range r.Plan.Actions {
		if a.Kind != Nothing {
			t.Errorf("second Apply: %+v", a)
		}
	}
	if hashFile(t, img) != before {
		t.Error("second Apply changed the disk")
	}
}

// Disks with anything on them are never written.
func TestApplyRefusesForeignDisks(t *testing.T) {
	for name, prepare := range map[string]func(t *testing.T, img, dev string){
		"ext4": func(t *testing.T, img, _ string) { run(t, "mkfs.ext4", "-q", "-F", img) },
		"foreign GPT": func(t *testing.T, _, dev string) {
			run(t, "sgdisk", "-n", "1:0:+8M", "-t", "1:8300", "-c", "1:data", dev)
		},
		"dos table": func(t *testing.T, _, dev string) {
			c := exec.Command("sfdisk", "-q", dev)
			c.Stdin = strings.NewReader("label: dos\n,8M,83\n")
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("sfdisk: %v: %s", err, out)
			}
		},
		// Issue 22: no signature is not blank.
		"random bytes, no signature": func(t *testing.T, img, _ string) {
			f, err := os.OpenFile(img, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := io.CopyN(f, rand.Reader, 8*mib); err != nil {
				t.Fatal(err)
			}
		},
		"a partition only the kernel lists": func(t *testing.T, _, dev string) {
			run(t, "addpart", dev, "1", "2048", "16384")
		},
		"volumed GPT and ext4 outside its partitions": func(t *testing.T, img, dev string) {
			if _, err := Apply(context.Background(), dev, []Want{{Label: "data", Size: 8 * mib}}); err != nil {
				t.Fatal(err)
			}
			// An XFS magic at offset 0 would be in the boot code
			// area; a LUKS2 secondary header at 512 KiB is in the gap
			// before the first partition.
			f, err := os.OpenFile(img, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("SKUL\xba\xbe"), 0x80000); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dev, img := loopDisk(t)
			prepare(t, img, dev)
			before := hashFile(t, img)
			r, err := Apply(context.Background(), dev, []Want{{Label: "data", Size: 8 * mib}, {Label: "new", Size: 8 * mib}})
			if !errors.Is(err, ErrRefused) || r.Wrote {
				t.Fatalf("Apply = %+v, %v; want refused", r, err)
			}
			t.Log(err)
			if hashFile(t, img) != before {
				t.Fatal("the disk changed")
			}
		})
	}
}

// A crash after the table is written and before the kernel hears of it:
// the next Apply writes nothing and only tells the kernel.
func TestApplyCrashBetweenWriteAndKernel(t *testing.T) {
	dev, img := loopDisk(t)
	crash := errors.New("crash")
	wants := []Want{{Label: "data", Size: 16 * mib}}
	r, err := apply(context.Background(), dev, wants, hooks{afterWrite: func() error { return crash }})
	if !errors.Is(err, crash) || !r.Wrote {
		t.Fatalf("apply = %+v, %v", r, err)
	}
	if _, _, ok := sysPart(t, dev, 1); ok {
		t.Fatal("the kernel has partition 1 before it was told")
	}
	if p, found, err := Find(context.Background(), dev, "data"); err != nil || found {
		t.Fatalf("Find before the kernel was told = %+v, %v, %v", p, found, err)
	}
	before := hashFile(t, img)
	r, err = Apply(context.Background(), dev, wants)
	if err != nil || r.Wrote || !slices.Equal(r.Told, []string{"add 1"}) {
		t.Fatalf("Apply after the crash = %+v, %v; want only the kernel told", r, err)
	}
	if hashFile(t, img) != before {
		t.Fatal("Apply after the crash wrote the disk again")
	}
	if start, size, ok := sysPart(t, dev, 1); !ok || start != mib || size != 16*mib {
		t.Fatalf("kernel partition 1: %d+%d (%v)", start, size, ok)
	}
	p, found, err := Find(context.Background(), dev, "data")
	if err != nil || !found || p.Device != dev+"p1" || p.Number != 1 || p.Start != mib || p.Size != 16*mib || p.GUID != r.Partitions[0].GUID {
		t.Fatalf("Find = %+v, %v, %v; want %+v", p, found, err, r.Partitions[0])
	}
	if _, found, err := Find(context.Background(), dev, "other"); err != nil || found {
		t.Fatalf("Find(other) = %v, %v", found, err)
	}
	if hashFile(t, img) != before {
		t.Fatal("Find wrote the disk")
	}
}

// The disk grows (the image and the loop device): the last partition,
// grow: true, takes the new room, the backup table moves to the new end.
func TestApplyGrownDisk(t *testing.T) {
	dev, img := loopDisk(t)
	wants := []Want{{Label: "data", Size: 8 * mib}, {Label: "rest", Grow: true}}
	if _, err := Apply(context.Background(), dev, wants); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 96*mib); err != nil {
		t.Fatal(err)
	}
	run(t, "losetup", "-c", dev)
	r, err := Apply(context.Background(), dev, wants)
	if err != nil || !r.Wrote || !slices.Equal(r.Told, []string{"resize 2"}) {
		t.Fatalf("Apply after growth = %+v, %v", r, err)
	}
	if start, size, ok := sysPart(t, dev, 2); !ok || start != 9*mib || size != 96*mib-33*512-9*mib {
		t.Errorf("kernel partition 2: %d+%d (%v)", start, size, ok)
	}
	if start, size, ok := sysPart(t, dev, 1); !ok || start != mib || size != 8*mib {
		t.Errorf("kernel partition 1 changed: %d+%d (%v)", start, size, ok)
	}
	if out := run(t, "sgdisk", "-v", dev); !strings.Contains(out, "No problems found") {
		t.Errorf("sgdisk -v: %s", out)
	}
	before := hashFile(t, img)
	if r, err := Apply(context.Background(), dev, wants); err != nil || r.Wrote || len(r.Told) != 0 {
		t.Fatalf("Apply again = %+v, %v", r, err)
	}
	if hashFile(t, img) != before {
		t.Fatal("Apply again changed the disk")
	}
}

// A partition is added while another one of the disk is mounted: the
// mounted one stays mounted and usable.
func TestApplyAddsBesideAMountedPartition(t *testing.T) {
	dev, _ := loopDisk(t)
	if _, err := Apply(context.Background(), dev, []Want{{Label: "a", Size: 16 * mib}}); err != nil {
		t.Fatal(err)
	}
	p1 := dev + "p1"
	waitNode(t, p1)
	run(t, "mkfs.ext4", "-q", p1)
	mnt := t.TempDir()
	if err := unix.Mount(p1, mnt, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	r, err := Apply(context.Background(), dev, []Want{{Label: "a", Size: 16 * mib}, {Label: "b", Size: 16 * mib}})
	if err != nil || !r.Wrote || !slices.Equal(r.Told, []string{"add 2"}) {
		t.Fatalf("Apply = %+v, %v", r, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "still-here"), []byte("yes"), 0o600); err != nil {
		t.Fatalf("the mounted partition is no longer usable: %v", err)
	}
	if start, size, ok := sysPart(t, dev, 2); !ok || start != 17*mib || size != 16*mib {
		t.Errorf("kernel partition 2: %d+%d (%v)", start, size, ok)
	}
}

func TestApplyRefusesAPartition(t *testing.T) {
	dev, _ := loopDisk(t)
	if _, err := Apply(context.Background(), dev, []Want{{Label: "a", Size: 16 * mib}}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, dev+"p1")
	if _, err := Apply(context.Background(), dev+"p1", []Want{{Label: "x", Size: mib}}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not a whole disk") {
		t.Fatalf("Apply on a partition = %v", err)
	}
}

// Volumes on one disk apply their partitions at the same time: each
// Apply reads, plans and writes the whole table, so without the disk's
// lock one would drop what another added.
func TestApplyConcurrently(t *testing.T) {
	dev, _ := loopDisk(t)
	labels := []string{"a", "b", "c", "d", "e", "f"}
	errs := make(chan error, len(labels))
	for _, l := range labels {
		go func() {
			_, err := Apply(context.Background(), dev, []Want{{Label: l, Size: 4 * mib}})
			errs <- err
		}()
	}
	for range labels {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, l := range labels {
		if _, found, err := Find(context.Background(), dev, l); err != nil || !found {
			t.Errorf("partition %s: found %v, %v", l, found, err)
		}
	}
	if out := run(t, "sgdisk", "-v", dev); !strings.Contains(out, "No problems found") {
		t.Errorf("sgdisk -v: %s", out)
	}
}

// A disk of 4 KiB sectors (most NVMe drives formatted 4Kn): the table
// sits in LBAs of 4 KiB, partitions start at 1 MiB = LBA 256.
func TestApply4KSectors(t *testing.T) {
	dev, _ := loopDisk(t, "-b", "4096")
	r, err := Apply(context.Background(), dev, []Want{{Label: "data", Size: 8 * mib}, {Label: "rest", Grow: true}})
	if err != nil || !r.Wrote {
		t.Fatalf("Apply = %+v, %v", r, err)
	}
	if a := r.Plan.Actions[0]; a.FirstLBA != 256 || a.LastLBA != 256+2048-1 {
		t.Errorf("data at LBAs %d-%d", a.FirstLBA, a.LastLBA)
	}
	if start, size, ok := sysPart(t, dev, 1); !ok || start != mib || size != 8*mib {
		t.Errorf("kernel partition 1: %d+%d (%v)", start, size, ok)
	}
	// The backup table: 4 sectors of array and the header, 20 KiB.
	if start, size, ok := sysPart(t, dev, 2); !ok || start != 9*mib || size != 64*mib-5*4096-9*mib {
		t.Errorf("kernel partition 2: %d+%d (%v)", start, size, ok)
	}
	if out := run(t, "sgdisk", "-v", dev); !strings.Contains(out, "No problems found") {
		t.Errorf("sgdisk -v: %s", out)
	}
	if r, err := Apply(context.Background(), dev, []Want{{Label: "data", Size: 8 * mib}, {Label: "rest", Grow: true}}); err != nil || r.Wrote || len(r.Told) != 0 {
		t.Fatalf("Apply again = %+v, %v", r, err)
	}
}

// The kernel has the partition's number somewhere else than the table
// says (another tool changed the table behind volumed): Apply says so
// and neither writes the disk nor touches the kernel's partition, which
// may be in use.
func TestApplyKernelDisagrees(t *testing.T) {
	dev, img := loopDisk(t)
	wants := []Want{{Label: "data", Size: 16 * mib}}
	if _, err := apply(context.Background(), dev, wants, hooks{afterWrite: func() error { return errors.New("crash") }}); err == nil {
		t.Fatal("no crash")
	}
	d, err := openDisk(dev, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer d.f.Close()
	if err := d.blkpg(unix.BLKPG_ADD_PARTITION, kpart{number: 1, start: 40 * mib, size: 4 * mib}, "other"); err != nil {
		t.Fatal(err)
	}
	before := hashFile(t, img)
	_, err = Apply(context.Background(), dev, wants)
	if err == nil || !strings.Contains(err.Error(), "the kernel's partition 1 spans bytes 41943040+4194304") {
		t.Fatalf("Apply = %v; want the disagreement named", err)
	}
	if start, size, ok := sysPart(t, dev, 1); !ok || start != 40*mib || size != 4*mib {
		t.Errorf("the kernel's partition 1 was changed: %d+%d (%v)", start, size, ok)
	}
	if _, found, err := Find(context.Background(), dev, "data"); found || err == nil {
		t.Errorf("Find = %v, %v; want the disagreement", found, err)
	}
	if hashFile(t, img) != before {
		t.Fatal("the disk changed")
	}
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

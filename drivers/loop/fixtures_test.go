package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testns"
)

func TestMain(m *testing.M) { testns.Main(m) }

const mib = 1 << 20

func newImage(tb testing.TB, dir, name string, size int64) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	created, err := EnsureImage(p, size)
	if err != nil || !created {
		tb.Fatalf("EnsureImage(%s) = %v, %v; want created", p, created, err)
	}
	return p
}

// attachT attaches and registers a detach that runs even if the test fails.
func attachT(tb testing.TB, o Options) *Device {
	tb.Helper()
	d, err := Attach(context.Background(), o)
	if err != nil {
		tb.Fatalf("Attach(%+v): %v", o, err)
	}
	tb.Cleanup(func() { cleanupDetach(tb, *d) })
	return d
}

func cleanupDetach(tb testing.TB, d Device) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Detach(ctx, d); err != nil && !errors.Is(err, ErrIdentity) {
		tb.Errorf("cleanup: %v", err)
	}
}

// boundTo reports whether loop device n currently backs d's file. Other
// packages' tests may bind a device number we just released, so "unbound"
// is checked as "no longer ours".
func boundTo(t *testing.T, n int, d Device) bool {
	t.Helper()
	cur, err := Get(n)
	if err != nil {
		t.Fatalf("Get(%d): %v", n, err)
	}
	return cur != nil && cur.sameFile(d)
}

func readSys(t *testing.T, n int, elem ...string) string {
	t.Helper()
	b, err := os.ReadFile(sysPath(n, elem...))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestAttachGetListFindDetach(t *testing.T) {
	img := newImage(t, t.TempDir(), "a.img", 64*mib)
	d := attachT(t, Options{File: img, Tag: "volumed-test"})

	dev, ino, err := FileIdentity(img)
	if err != nil {
		t.Fatal(err)
	}
	want := Device{
		Path: fmt.Sprintf("/dev/loop%d", d.Number), Number: d.Number,
		BackingFile: img, BackingDev: dev, BackingIno: ino,
		Tag: "volumed-test", SizeBytes: 64 * mib,
	}
	if *d != want {
		t.Fatalf("Attach returned %+v, want %+v", *d, want)
	}
	if id := d.Identity(); id != fmt.Sprintf("loop:%s@%d:%d", img, dev, ino) {
		t.Errorf("Identity() = %q", id)
	}
	if readSys(t, d.Number, "ro") != "0" {
		t.Errorf("sysfs says %s is read-only", d.Path)
	}

	// The device really is the file: bytes written through it land in the image.
	payload := []byte("written through the loop device")
	if err := writeAt(d.Path, payload, 4096); err != nil {
		t.Fatalf("write %s: %v", d.Path, err)
	}
	got := make([]byte, len(payload))
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(got, 4096)
	f.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("image holds %q (%v), want %q", got, err, payload)
	}

	g, err := Get(d.Number)
	if err != nil || g == nil || *g != *d {
		t.Fatalf("Get(%d) = %+v, %v; want %+v", d.Number, g, err, *d)
	}
	all, err := List()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range all {
		found = found || l == *d
	}
	if !found {
		t.Errorf("List() = %+v, does not hold %+v", all, *d)
	}
	fs, err := Find(img)
	if err != nil || len(fs) != 1 || fs[0] != *d {
		t.Fatalf("Find(%s) = %+v, %v; want [%+v]", img, fs, err, *d)
	}

	if err := Detach(context.Background(), *d); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if boundTo(t, d.Number, *d) {
		t.Fatalf("%s still backs %s after Detach", d.Path, img)
	}
	fs, err = Find(img)
	if err != nil || fs == nil || len(fs) != 0 {
		t.Fatalf("Find after Detach = %#v, %v; want empty slice", fs, err)
	}
	// Detaching what is already detached succeeds (unless the number was
	// re-used by someone else meanwhile, which must then be refused).
	err = Detach(context.Background(), *d)
	if cur, _ := Get(d.Number); cur == nil && err != nil {
		t.Errorf("second Detach: %v", err)
	} else if cur != nil && !errors.Is(err, ErrIdentity) {
		t.Errorf("second Detach of a re-used number: %v, want ErrIdentity", err)
	}
}

func writeAt(path string, b []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Sync()
}

func TestTag(t *testing.T) {
	dir := t.TempDir()
	tagged := attachT(t, Options{File: newImage(t, dir, "t.img", mib), Tag: strings.Repeat("x", MaxTagLen)})
	plain := attachT(t, Options{File: newImage(t, dir, "p.img", mib)})
	for _, c := range []struct {
		d   *Device
		tag string
	}{{tagged, strings.Repeat("x", MaxTagLen)}, {plain, ""}} {
		g, err := Get(c.d.Number)
		if err != nil || g == nil {
			t.Fatalf("Get(%d) = %v, %v", c.d.Number, g, err)
		}
		if g.Tag != c.tag {
			t.Errorf("%s: tag read back %q, want %q", g.Path, g.Tag, c.tag)
		}
	}
	if _, err := Attach(context.Background(), Options{File: newImage(t, dir, "l.img", mib), Tag: strings.Repeat("x", MaxTagLen+1)}); err == nil {
		t.Fatal("Attach accepted a tag longer than MaxTagLen")
	}
}

func TestReadOnly(t *testing.T) {
	d := attachT(t, Options{File: newImage(t, t.TempDir(), "ro.img", 4*mib), ReadOnly: true})
	if !d.ReadOnly {
		t.Errorf("Device.ReadOnly = false")
	}
	if ro := readSys(t, d.Number, "ro"); ro != "1" {
		t.Errorf("/sys/block/loop%d/ro = %s, want 1", d.Number, ro)
	}
	err := writeAt(d.Path, []byte("nope"), 0)
	if err == nil {
		t.Fatal("writing to a read-only loop device succeeded")
	}
	if !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		t.Fatalf("write to read-only device: %v, want EROFS/EPERM/EACCES", err)
	}
}

func TestFindByIdentityNotName(t *testing.T) {
	dir := t.TempDir()
	img := newImage(t, dir, "a.img", 4*mib)
	d := attachT(t, Options{File: img})
	moved := filepath.Join(dir, "moved.img")
	if err := os.Rename(img, moved); err != nil {
		t.Fatal(err)
	}
	newImage(t, dir, "a.img", 4*mib) // same name, another file

	if fs, err := Find(img); err != nil || len(fs) != 0 {
		t.Errorf("Find(%s) of a new file with the old name = %+v, %v; want none", img, fs, err)
	}
	fs, err := Find(moved)
	if err != nil || len(fs) != 1 || fs[0].Number != d.Number {
		t.Fatalf("Find(%s) = %+v, %v; want %s", moved, fs, err, d.Path)
	}
	if fs[0].BackingFile != moved {
		t.Errorf("BackingFile = %q, want the kernel's view %q", fs[0].BackingFile, moved)
	}

	if err := os.Remove(moved); err != nil {
		t.Fatal(err)
	}
	g, err := Get(d.Number)
	if err != nil || g == nil {
		t.Fatalf("Get = %v, %v", g, err)
	}
	if !g.Deleted || g.BackingFile != moved || !g.sameFile(*d) {
		t.Errorf("after unlink: %+v, want Deleted with BackingFile %q", *g, moved)
	}
	if _, err := Find(moved); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Find of a missing file: %v, want ErrNotExist", err)
	}
}

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

func TestAttachRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	img := newImage(t, dir, "a.img", mib)
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(img, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.img")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A parent directory that is a symlink: the image behind it is
	// someone else's to name.
	linkedDir := filepath.Join(t.TempDir(), "images")
	if err := os.Symlink(dir, linkedDir); err != nil {
		t.Fatal(err)
	}
	viaDir := filepath.Join(linkedDir, "a.img")
	if _, err := EnsureImage(filepath.Join(linkedDir, "new.img"), mib); err == nil {
		t.Error("EnsureImage created an image through a symlinked directory")
	}
	for _, p := range []string{link, fifo, dir, empty, filepath.Join(dir, "missing.img"), viaDir} {
		d, err := Attach(context.Background(), Options{File: p})
		if err == nil {
			cleanupDetach(t, *d)
			t.Errorf("Attach(%s) succeeded, want refusal", p)
		}
	}
}

func TestEnsureImageNeverTruncates(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "new", "sub", "x.img")
	created, err := EnsureImage(img, 8*mib)
	if err != nil || !created {
		t.Fatalf("EnsureImage = %v, %v; want created", created, err)
	}
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 8*mib || st.Mode().Perm() != 0o600 {
		t.Errorf("new image: size %d mode %v, want %d 0600", st.Size(), st.Mode().Perm(), 8*mib)
	}
	if blocks := st.Sys().(*syscall.Stat_t).Blocks; blocks*512 >= 8*mib {
		t.Errorf("image is not sparse: %d blocks", blocks)
	}
	for _, p := range []string{filepath.Join(dir, "new"), filepath.Join(dir, "new", "sub")} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("parent %s: %v, %v; want 0755", p, st.Mode(), err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(img)); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the image", len(ents))
	}

	head, tail := []byte("head of the image"), []byte("tail of the image")
	if err := writeAt(img, head, 0); err != nil {
		t.Fatal(err)
	}
	if err := writeAt(img, tail, 8*mib-int64(len(tail))); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{4096, 16 * mib} {
		created, err := EnsureImage(img, size)
		if err != nil || created {
			t.Fatalf("EnsureImage(existing, %d) = %v, %v; want not created", size, created, err)
		}
		b, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 8*mib || !bytes.HasPrefix(b, head) || !bytes.HasSuffix(b, tail) {
			t.Fatalf("after EnsureImage(%d): size %d, data intact %v", size, len(b), bytes.HasPrefix(b, head) && bytes.HasSuffix(b, tail))
		}
	}

	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(img, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, link} {
		if created, err := EnsureImage(p, mib); err == nil || created {
			t.Errorf("EnsureImage(%s) = %v, %v; want an error for a non-regular file", p, created, err)
		}
	}
}

func TestGrow(t *testing.T) {
	img := newImage(t, t.TempDir(), "g.img", 16*mib)
	d := attachT(t, Options{File: img})

	n, err := Grow(context.Background(), *d, 40*mib)
	if err != nil || n != 40*mib {
		t.Fatalf("Grow = %d, %v; want %d", n, err, 40*mib)
	}
	if s := readSys(t, d.Number, "size"); s != fmt.Sprint(40*mib/512) {
		t.Errorf("/sys/block/loop%d/size = %s sectors, want %d", d.Number, s, 40*mib/512)
	}
	n, err = Grow(context.Background(), *d, 8*mib)
	if err != nil || n != 40*mib {
		t.Fatalf("Grow to a smaller size = %d, %v; want %d unchanged", n, err, 40*mib)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 40*mib {
		t.Fatalf("image size after shrink attempt: %v, %v", st.Size(), err)
	}

	stale := *d
	stale.BackingIno++
	if _, err := Grow(context.Background(), stale, 64*mib); !errors.Is(err, ErrIdentity) {
		t.Errorf("Grow with a stale identity: %v, want ErrIdentity", err)
	}
}

func TestParallelAttach(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	devs := make([]*Device, n)
	errs := make([]error, n)
	imgs := make([]string, n)
	for i := range n {
		imgs[i] = newImage(t, dir, fmt.Sprintf("p%d.img", i), mib)
	}
	// Released together so that they ask LOOP_CTL_GET_FREE at the same
	// time and are handed the same free device.
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			devs[i], errs[i] = Attach(context.Background(), Options{File: imgs[i]})
		})
	}
	close(start)
	wg.Wait()
	for i, d := range devs {
		if d != nil {
			t.Cleanup(func() { cleanupDetach(t, *d) })
		}
		if errs[i] != nil {
			t.Errorf("Attach %d: %v", i, errs[i])
		}
	}
	if t.Failed() {
		return
	}
	seen := map[int]bool{}
	for i, d := range devs {
		if seen[d.Number] {
			t.Errorf("%s handed out twice", d.Path)
		}
		seen[d.Number] = true
		fs, err := Find(filepath.Join(dir, fmt.Sprintf("p%d.img", i)))
		if err != nil || len(fs) != 1 || fs[0].Number != d.Number {
			t.Errorf("Find(p%d.img) = %+v, %v; want %s", i, fs, err, d.Path)
		}
	}
}

func BenchmarkAttachDetach(b *testing.B) {
	img := newImage(b, b.TempDir(), "bench.img", 16*mib)
	ctx := context.Background()
	for b.Loop() {
		d, err := Attach(ctx, Options{File: img, Tag: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if err := Detach(ctx, *d); err != nil {
			cleanupDetach(b, *d)
			b.Fatal(err)
		}
	}
}

package loop

// Attach and find: a device bound to its image, tagged, read-only, found by identity, never of a non-regular file, in parallel.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

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

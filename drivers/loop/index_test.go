package loop

import (
	"context"
	"testing"
	"time"
)

func TestIndexFind(t *testing.T) {
	dir := t.TempDir()
	img := newImage(t, dir, "a.img", mib)
	other := newImage(t, dir, "b.img", mib)
	x := &Index{MaxAge: time.Hour}
	if devs, err := x.Find(img); err != nil || len(devs) != 0 {
		t.Fatalf("before attach: %v %v", devs, err)
	}
	d := attachT(t, Options{File: img})
	// Stale (an hour): the new device is not seen until invalidated.
	if devs, _ := x.Find(img); len(devs) != 0 {
		t.Fatalf("a stale index found %v", devs)
	}
	x.Invalidate()
	devs, err := x.Find(img)
	if err != nil || len(devs) != 1 || devs[0].Number != d.Number {
		t.Fatalf("after invalidate: %v %v, want %s", devs, err, d.Path)
	}
	if devs, _ := x.Find(other); len(devs) != 0 {
		t.Fatalf("another image matched %v", devs)
	}
	// A device noted by the caller is found without a new read.
	x2 := &Index{MaxAge: time.Hour}
	if _, err := x2.Find(other); err != nil {
		t.Fatal(err)
	}
	d2 := attachT(t, Options{File: other})
	x2.Note(*d2)
	if devs, _ := x2.Find(other); len(devs) != 1 || devs[0].Number != d2.Number {
		t.Fatalf("a noted device was not found: %v", devs)
	}
	// A device detached behind the index's back is not reported: every
	// candidate is checked by identity.
	if err := Detach(context.Background(), *d); err != nil {
		t.Fatal(err)
	}
	if devs, _ := x.Find(img); len(devs) != 0 {
		t.Fatalf("a detached device was reported: %v", devs)
	}
}

// An image whose name ends in a blank is found through the index as
// through Find: sysfs's backing_file is a path, and only its newline is
// the kernel's.
func TestIndexFindsANameEndingInABlank(t *testing.T) {
	img := newImage(t, t.TempDir(), "data.img ", mib)
	d := attachT(t, Options{File: img})
	if d.BackingFile != img {
		t.Errorf("BackingFile = %q, want %q", d.BackingFile, img)
	}
	devs, err := (&Index{MaxAge: time.Hour}).Find(img)
	if err != nil || len(devs) != 1 || devs[0].Number != d.Number {
		t.Fatalf("Index.Find(%q) = %v, %v; want %s", img, devs, err, d.Path)
	}
}

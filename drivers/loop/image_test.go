package loop

// The image file: made without truncating one, grown.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

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

package blockfs

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMkfs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct {
		fstype, tool string
		size         int64
	}{
		{"ext4", "mkfs.ext4", 64 * mib},
		{"xfs", "mkfs.xfs", 320 * mib},
		{"btrfs", "mkfs.btrfs", 256 * mib},
	} {
		t.Run(c.fstype, func(t *testing.T) {
			need(t, c.tool)
			img := image(t, "fs.img", c.size)
			if err := Mkfs(ctx, img, c.fstype, "", nil); err != nil {
				t.Fatal(err)
			}
			if got := types(probeFile(t, img), SourceVolumed); !slices.Equal(got, []string{c.fstype}) {
				t.Fatalf("after Mkfs %s, Probe types = %v", c.fstype, got)
			}
		})
	}
	t.Run("extra-args", func(t *testing.T) {
		need(t, "mkfs.ext4")
		img := image(t, "fs.img", 64*mib)
		if err := Mkfs(ctx, img, "ext4", "", []string{"-L", "vlabel"}); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		label := make([]byte, 16)
		if _, err := f.ReadAt(label, 1024+0x78); err != nil {
			t.Fatal(err)
		}
		if got := string(bytes.TrimRight(label, "\x00")); got != "vlabel" {
			t.Fatalf("ext4 volume label = %q, want vlabel", got)
		}
	})
	t.Run("unsupported", func(t *testing.T) {
		img := image(t, "fs.img", 64*mib)
		if err := Mkfs(ctx, img, "vfat", "", nil); err == nil {
			t.Fatal("Mkfs vfat succeeded")
		}
		if sigs := probeFile(t, img); len(sigs) != 0 {
			t.Fatalf("unsupported Mkfs wrote something: %+v", sigs)
		}
	})
	// A device below the type's minimum is refused before mkfs runs, in
	// a manifest's units.
	t.Run("too-small", func(t *testing.T) {
		img := image(t, "fs.img", 64*mib)
		err := Mkfs(ctx, img, "xfs", "", nil)
		if err == nil || !strings.Contains(err.Error(), "the device holds 64Mi, and xfs needs at least 300Mi") {
			t.Fatalf("Mkfs xfs on 64 MiB: %v", err)
		}
		if sigs := probeFile(t, img); len(sigs) != 0 {
			t.Fatalf("a refused Mkfs wrote something: %+v", sigs)
		}
	})
	// The tools' own "existing filesystem" checks must stay on.
	for _, c := range []struct{ fstype, tool string }{{"xfs", "mkfs.xfs"}, {"btrfs", "mkfs.btrfs"}} {
		t.Run(c.fstype+"-refuses-existing-ext4", func(t *testing.T) {
			need(t, c.tool, "mkfs.ext4")
			img := image(t, "fs.img", 320*mib)
			runCmd(t, "", "mkfs.ext4", "-q", "-F", img)
			err := Mkfs(ctx, img, c.fstype, "", nil)
			if err == nil {
				t.Fatalf("Mkfs %s over an ext4 image succeeded", c.fstype)
			}
			if !strings.Contains(err.Error(), c.tool) {
				t.Errorf("error %q does not name the tool", err)
			}
			if got := types(probeFile(t, img), SourceVolumed); !slices.Equal(got, []string{"ext4"}) {
				t.Fatalf("after refused Mkfs, types = %v, want [ext4]", got)
			}
		})
	}
}

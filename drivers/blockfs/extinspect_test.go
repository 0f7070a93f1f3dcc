package blockfs

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/volumed/volumed/internal/testtool"
)

// extImage makes a 16 MiB image with mkfs.ext4 and args, then runs each
// debugfs request on it.
func extImage(t *testing.T, args []string, debugfs ...string) string {
	t.Helper()
	img := image(t, "img", 16*mib)
	runCmd(t, "", "mkfs.ext4", append(append([]string{"-q", "-F"}, args...), img)...)
	for _, req := range debugfs {
		runCmd(t, "", "debugfs", "-w", "-R", req, img)
	}
	return img
}

// An ext2/3/4 read without blkid says what blkid says of it: the UUID,
// whether it was ever mounted, its size; no UUID when it was cleared.
func TestInspectExtIsBlkid(t *testing.T) {
	testtool.Need(t, "e2fsprogs, util-linux", "mkfs.ext4", "debugfs", "blkid")
	ctx := context.Background()
	cases := []struct {
		name    string
		args    []string
		debugfs []string
	}{
		{"ext2", []string{"-t", "ext2"}, nil},
		{"ext3", []string{"-t", "ext3"}, nil},
		{"ext4", nil, nil},
		{"ext4 without metadata_csum", []string{"-O", "^metadata_csum"}, nil},
		{"ext4 64bit", []string{"-O", "64bit"}, nil},
		{"ext4 with its UUID cleared", []string{"-U", "clear"}, nil},
		{"ext4 mounted before", nil, []string{"ssv mnt_count 3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := extImage(t, c.args, c.debugfs...)
			got, ok, err := inspectExt(img)
			if err != nil || !ok {
				t.Fatalf("inspectExt = %+v, %v, %v; want it read", got, ok, err)
			}
			want, err := inspectBlkid(ctx, img)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("read without blkid %+v, blkid %+v", got, want)
			}
			if (got.UUID == "") != (c.name == "ext4 with its UUID cleared") || got.EverMounted != (c.debugfs != nil) || got.Bytes != 16<<20 {
				t.Fatalf("inspectExt = %+v", got)
			}
		})
	}
}

// What is not one ext with a sound superblock is left to blkid: a
// superblock whose checksum fails, an ext beside another signature.
func TestInspectExtLeavesTheRestToBlkid(t *testing.T) {
	testtool.Need(t, "e2fsprogs, util-linux", "mkfs.ext4", "debugfs", "blkid")
	ctx := context.Background()
	torn := extImage(t, nil)
	writeAt(t, torn, 1024+0x78, []byte("x")) // s_volume_name, the checksum not updated
	two := extImage(t, nil)
	writeAt(t, two, 0, []byte("XFSB"))
	for name, img := range map[string]string{"checksum fails": torn, "ext and xfs": two} {
		t.Run(name, func(t *testing.T) {
			if info, ok, err := inspectExt(img); ok || err != nil {
				t.Fatalf("inspectExt = %+v, %v, %v; want it left to blkid", info, ok, err)
			}
			got, err := Inspect(ctx, img)
			want, werr := inspectBlkid(ctx, img)
			if got != want || (err == nil) != (werr == nil) {
				t.Fatalf("Inspect = %+v, %v; blkid %+v, %v", got, err, want, werr)
			}
		})
	}
}

// Bringing an ext4 volume up runs no blkid: a blkid that fails (first
// on PATH) does not fail Inspect of one.
func TestInspectExtRunsNoBlkid(t *testing.T) {
	testtool.Need(t, "e2fsprogs", "mkfs.ext4")
	img := extImage(t, nil)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "blkid"), []byte("#!/bin/sh\necho blkid was run >&2\nexit 4\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if info, err := Inspect(context.Background(), img); err != nil || info.UUID == "" {
		t.Fatalf("Inspect = %+v, %v; want the UUID, without blkid", info, err)
	}
}

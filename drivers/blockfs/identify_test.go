package blockfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/volumed/volumed/internal/testtool"
)

// A filesystem made with a UUID carries it, says it was never mounted
// until it is, and checks clean; damage makes its checker say so.
func TestInspectAndCheckReadOnly(t *testing.T) {
	testtool.Need(t, "e2fsprogs, xfsprogs, btrfs-progs", "mkfs.ext4", "mkfs.xfs", "mkfs.btrfs", "e2fsck", "xfs_repair", "btrfs")
	ctx := context.Background()
	const uuid = "5e0c1f7a-9b2d-4c3e-8f40-1a2b3c4d5e6f"
	for _, fstype := range []string{"ext4", "xfs", "btrfs"} {
		t.Run(fstype, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			if err := os.WriteFile(img, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, 320<<20); err != nil {
				t.Fatal(err)
			}
			if err := Mkfs(ctx, img, fstype, uuid, nil); err != nil {
				t.Fatal(err)
			}
			info, err := Inspect(ctx, img)
			if err != nil || info.UUID != uuid || info.EverMounted || info.Bytes != 320<<20 {
				t.Fatalf("Inspect = %+v, %v; want UUID %s, never mounted, 320 MiB", info, err, uuid)
			}
			// The device grown, the filesystem not: its own size says so.
			if err := os.Truncate(img, 384<<20); err != nil {
				t.Fatal(err)
			}
			if info, err := Inspect(ctx, img); err != nil || info.Bytes != 320<<20 {
				t.Fatalf("the image grown under it: Inspect = %+v, %v; want 320 MiB still", info, err)
			}
			if res, err := CheckReadOnly(ctx, fstype, img); res != CheckClean {
				t.Fatalf("fresh %s: check = %d, %v", fstype, res, err)
			}
			if fstype == "ext4" {
				mnt := t.TempDir()
				if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
					t.Fatalf("mount: %v: %s", err, out)
				}
				if out, err := exec.Command("umount", "-d", mnt).CombinedOutput(); err != nil {
					t.Fatalf("umount: %v: %s", err, out)
				}
				if info, err := Inspect(ctx, img); err != nil || !info.EverMounted {
					t.Fatalf("after a mount: Inspect = %+v, %v; want EverMounted", info, err)
				}
			}
			// Damage: zero the metadata after the primary superblock.
			f, err := os.OpenFile(img, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			zero, off := make([]byte, 4<<20), int64(68<<10)
			if fstype == "btrfs" {
				// Its trees live in chunks past the first MiB.
				zero, off = make([]byte, 200<<20), 1<<20
			}
			if _, err := f.WriteAt(zero, off); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if res, err := CheckReadOnly(ctx, fstype, img); res == CheckClean {
				t.Errorf("damaged %s checks clean (%v)", fstype, err)
			}
		})
	}
}

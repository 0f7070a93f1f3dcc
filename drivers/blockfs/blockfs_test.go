package blockfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

var writeSeeds = flag.Bool("write-seeds", false, "regenerate testdata/fuzz/FuzzProbe from real images")

func TestMain(m *testing.M) { testns.Main(m) }

const mib = 1 << 20

// image creates a sparse file of size bytes.
func image(t *testing.T, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		testtool.Need(t, "e2fsprogs, xfsprogs, btrfs-progs, dosfstools, fdisk, gdisk, util-linux", tool)
	}
}

func have(tool string) bool { _, err := exec.LookPath(tool); return err == nil }

func runCmd(t *testing.T, stdin string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func probeFile(t *testing.T, path string) []Signature {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	sigs, err := Probe(f, fi.Size())
	if err != nil {
		t.Fatalf("Probe(%s): %v", path, err)
	}
	return sigs
}

// types returns the distinct types found by source, sorted.
func types(sigs []Signature, source string) []string {
	var out []string
	for _, s := range sigs {
		if s.Source == source && !slices.Contains(out, s.Type) {
			out = append(out, s.Type)
		}
	}
	slices.Sort(out)
	return out
}

// checkAgainstBlkid asserts that ProbeDevice reports everything blkid
// sees, that our probe sees everything blkid sees (blkid must never know
// more than we do about the formats we cover), and, when wantBlkid is
// set, that blkid itself recognised the image as that type.
func checkAgainstBlkid(t *testing.T, path string, wantBlkid string) {
	t.Helper()
	if !have("blkid") {
		t.Logf("blkid not installed: cross-check skipped")
		return
	}
	sigs, err := ProbeDevice(context.Background(), path)
	if err != nil {
		t.Fatalf("ProbeDevice(%s): %v", path, err)
	}
	ours, theirs := types(sigs, SourceVolumed), types(sigs, SourceBlkid)
	for _, typ := range theirs {
		if !slices.Contains(ours, typ) {
			t.Errorf("blkid found %q that our probe missed (ours %v)", typ, ours)
		}
	}
	if wantBlkid != "" && !slices.Contains(theirs, wantBlkid) {
		t.Errorf("blkid types %v, want %q among them", theirs, wantBlkid)
	}
}

func TestProbeRealFilesystems(t *testing.T) {
	cases := []struct {
		name string
		want string
		size int64
		tool string
		args []string
	}{
		{"ext2", "ext2", 64 * mib, "mke2fs", []string{"-q", "-F", "-t", "ext2"}},
		{"ext3", "ext3", 64 * mib, "mke2fs", []string{"-q", "-F", "-t", "ext3"}},
		{"ext4", "ext4", 64 * mib, "mkfs.ext4", []string{"-q", "-F"}},
		{"ext4-nojournal", "ext4", 64 * mib, "mkfs.ext4", []string{"-q", "-F", "-O", "^has_journal"}},
		{"xfs", "xfs", 320 * mib, "mkfs.xfs", []string{"-q"}},
		{"btrfs", "btrfs", 256 * mib, "mkfs.btrfs", []string{"-q"}},
		{"vfat12", "vfat", 4 * mib, "mkfs.vfat", []string{"-F", "12"}},
		{"vfat16", "vfat", 64 * mib, "mkfs.vfat", []string{"-F", "16"}},
		{"vfat32", "vfat", 64 * mib, "mkfs.vfat", []string{"-F", "32"}},
		{"swap4k", "swap", 16 * mib, "mkswap", []string{"--pagesize", "4096"}},
		{"swap64k", "swap", 16 * mib, "mkswap", []string{"--pagesize", "65536"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			need(t, c.tool)
			img := image(t, c.name+".img", c.size)
			runCmd(t, "", c.tool, append(c.args, img)...)
			if got := types(probeFile(t, img), SourceVolumed); !slices.Equal(got, []string{c.want}) {
				t.Fatalf("Probe types = %v, want exactly [%s]", got, c.want)
			}
			checkAgainstBlkid(t, img, c.want)
		})
	}
}

func TestProbeBlank(t *testing.T) {
	img := image(t, "blank.img", 256*mib)
	if sigs := probeFile(t, img); len(sigs) != 0 {
		t.Fatalf("blank image: %+v", sigs)
	}
	sigs, err := ProbeDevice(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != 0 {
		t.Fatalf("ProbeDevice on blank image: %+v", sigs)
	}
}

// writeGPT writes a protective MBR and valid primary and backup GPT
// headers (with CRCs, so blkid accepts them) with one partition.
func writeGPT(t *testing.T, path string, size, sector int64) {
	t.Helper()
	lastLBA := size/sector - 1
	const nEntries, entrySize = 128, 128
	entries := make([]byte, nEntries*entrySize)
	copy(entries[0:16], []byte{0xAF, 0x3D, 0xC6, 0x0F, 0x83, 0x84, 0x72, 0x47, 0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D, 0xE4}) // Linux filesystem
	copy(entries[16:32], bytes.Repeat([]byte{0x42}, 16))
	entryLBAs := int64(len(entries)) / sector
	first, last := 2+entryLBAs, lastLBA-1-entryLBAs
	binary.LittleEndian.PutUint64(entries[32:], uint64(first))
	binary.LittleEndian.PutUint64(entries[40:], uint64(last))
	header := func(my, alt, entriesLBA int64) []byte {
		h := make([]byte, 92)
		copy(h, "EFI PART")
		binary.LittleEndian.PutUint32(h[8:], 0x00010000)
		binary.LittleEndian.PutUint32(h[12:], 92)
		binary.LittleEndian.PutUint64(h[24:], uint64(my))
		binary.LittleEndian.PutUint64(h[32:], uint64(alt))
		binary.LittleEndian.PutUint64(h[40:], uint64(first))
		binary.LittleEndian.PutUint64(h[48:], uint64(last))
		copy(h[56:72], bytes.Repeat([]byte{0x17}, 16))
		binary.LittleEndian.PutUint64(h[72:], uint64(entriesLBA))
		binary.LittleEndian.PutUint32(h[80:], nEntries)
		binary.LittleEndian.PutUint32(h[84:], entrySize)
		binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(entries))
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h))
		return h
	}
	mbr := make([]byte, 512)
	e := mbr[0x1BE:]
	e[4] = 0xEE
	binary.LittleEndian.PutUint32(e[8:], 1)
	binary.LittleEndian.PutUint32(e[12:], uint32(min(lastLBA, 0xFFFFFFFF)))
	mbr[510], mbr[511] = 0x55, 0xAA
	writeAt(t, path, 0, mbr)
	writeAt(t, path, sector, header(1, lastLBA, 2))
	writeAt(t, path, 2*sector, entries)
	writeAt(t, path, (lastLBA-entryLBAs)*sector, entries)
	writeAt(t, path, lastLBA*sector, header(lastLBA, 1, lastLBA-entryLBAs))
}

func makeGPT(t *testing.T, size int64) string {
	t.Helper()
	img := image(t, "gpt.img", size)
	switch {
	case have("sgdisk"):
		runCmd(t, "", "sgdisk", "-n", "1:0:0", img)
	case have("sfdisk"):
		runCmd(t, "label: gpt\n,,L\n", "sfdisk", "-q", img)
	default:
		t.Logf("neither sgdisk nor sfdisk installed: writing the GPT by hand")
		writeGPT(t, img, size, 512)
	}
	return img
}

func offsetsOf(sigs []Signature, typ string) []int64 {
	var out []int64
	for _, s := range sigs {
		if s.Type == typ && s.Source == SourceVolumed {
			out = append(out, s.Offset)
		}
	}
	return out
}

func TestProbePartitionTables(t *testing.T) {
	const size = 64 * mib
	t.Run("dos", func(t *testing.T) {
		img := image(t, "mbr.img", size)
		if have("sfdisk") {
			runCmd(t, "label: dos\nstart=2048, size=20480, type=83\n", "sfdisk", "-q", img)
		} else {
			t.Logf("sfdisk not installed: writing the MBR by hand")
			mbr := make([]byte, 512)
			binary.LittleEndian.PutUint32(mbr[440:], 0x12345678)
			e := mbr[0x1BE:]
			e[4] = 0x83
			binary.LittleEndian.PutUint32(e[8:], 2048)
			binary.LittleEndian.PutUint32(e[12:], 20480)
			mbr[510], mbr[511] = 0x55, 0xAA
			writeAt(t, img, 0, mbr)
		}
		if got := types(probeFile(t, img), SourceVolumed); !slices.Equal(got, []string{"dos"}) {
			t.Fatalf("types = %v, want [dos]", got)
		}
		checkAgainstBlkid(t, img, "dos")
	})
	t.Run("gpt", func(t *testing.T) {
		img := makeGPT(t, size)
		sigs := probeFile(t, img)
		if got := types(sigs, SourceVolumed); !slices.Equal(got, []string{"gpt"}) {
			t.Fatalf("types = %v, want [gpt]", got)
		}
		if offs := offsetsOf(sigs, "gpt"); !slices.Contains(offs, 512) || !slices.Contains(offs, size-512) {
			t.Fatalf("gpt offsets %v: want primary (512) and backup (%d)", offs, size-512)
		}
		checkAgainstBlkid(t, img, "gpt")
	})
	t.Run("gpt-by-hand", func(t *testing.T) {
		img := image(t, "gpt.img", size)
		writeGPT(t, img, size, 512)
		if got := types(probeFile(t, img), SourceVolumed); !slices.Equal(got, []string{"gpt"}) {
			t.Fatalf("types = %v, want [gpt]", got)
		}
		checkAgainstBlkid(t, img, "gpt")
	})
	t.Run("gpt-4k-sectors", func(t *testing.T) {
		img := image(t, "gpt4k.img", size)
		writeGPT(t, img, size, 4096)
		writeAt(t, img, 0, make([]byte, 512)) // no protective MBR either
		sigs := probeFile(t, img)
		if offs := offsetsOf(sigs, "gpt"); !slices.Equal(offs, []int64{4096, size - 4096}) {
			t.Fatalf("gpt offsets %v, want [4096 %d]", offs, size-4096)
		}
	})
	t.Run("gpt-primary-wiped", func(t *testing.T) {
		img := makeGPT(t, size)
		// What `dd if=/dev/zero of=disk bs=1M count=1` leaves behind.
		writeAt(t, img, 0, make([]byte, mib))
		sigs := probeFile(t, img)
		if offs := offsetsOf(sigs, "gpt"); !slices.Equal(offs, []int64{size - 512}) {
			t.Fatalf("gpt offsets %v, want only the backup at %d; all: %+v", offs, size-512, sigs)
		}
		checkAgainstBlkid(t, img, "")
	})
}

func TestProbeHandWrittenMagic(t *testing.T) {
	const size = 64 * mib
	mdMagic := binary.LittleEndian.AppendUint32(nil, 0xa92b4efc)
	lvm := make([]byte, 32)
	copy(lvm, "LABELONE")
	binary.LittleEndian.PutUint64(lvm[8:], 1)
	binary.LittleEndian.PutUint32(lvm[20:], 32)
	copy(lvm[24:], "LVM2 001")
	cases := []struct {
		name       string
		size       int64
		off        int64
		data       []byte
		want       string
		wantOffset int64
	}{
		{"luks1", size, 0, []byte("LUKS\xba\xbe\x00\x01"), "crypto_LUKS", 0},
		{"luks2-secondary-only", size, 0x4000, []byte("SKUL\xba\xbe\x00\x02"), "crypto_LUKS", 0x4000},
		{"luks2-secondary-at-4m", size, 0x400000, []byte("SKUL\xba\xbe\x00\x02"), "crypto_LUKS", 0x400000},
		{"lvm2-sector1", size, 512, lvm, "LVM2_member", 512},
		{"md-0.90", size, size - 64*1024, mdMagic, "linux_raid_member", size - 64*1024},
		{"md-0.90-unaligned-size", size + 5000, size - 64*1024, mdMagic, "linux_raid_member", size - 64*1024},
		{"md-1.0", size, size - 8192, mdMagic, "linux_raid_member", size - 8192},
		{"md-1.1", size, 0, mdMagic, "linux_raid_member", 0},
		{"md-1.2", size, 4096, mdMagic, "linux_raid_member", 4096},
		{"ntfs", size, 3, []byte("NTFS    "), "ntfs", 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := image(t, c.name+".img", c.size)
			writeAt(t, img, c.off, c.data)
			sigs := probeFile(t, img)
			if len(sigs) != 1 || sigs[0].Type != c.want || sigs[0].Offset != c.wantOffset || sigs[0].Source != SourceVolumed {
				t.Fatalf("Probe = %+v, want one %s at %d", sigs, c.want, c.wantOffset)
			}
			checkAgainstBlkid(t, img, "")
		})
	}
}

type failingReader struct{ err error }

func (r failingReader) ReadAt([]byte, int64) (int, error) { return 0, r.err }

func TestProbeReadErrorsAreNotBlank(t *testing.T) {
	eio := errors.New("input/output error")
	if sigs, err := Probe(failingReader{eio}, 64*mib); !errors.Is(err, eio) {
		t.Fatalf("Probe over failing reader = %v, %v; want the read error", sigs, err)
	}
	// A device that claims to be larger than what can be read from it.
	if _, err := Probe(bytes.NewReader(make([]byte, 4096)), 64*mib); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Probe over short reader: err = %v, want ErrUnexpectedEOF", err)
	}
	if _, err := Probe(bytes.NewReader(nil), -1); err == nil {
		t.Fatal("negative size accepted")
	}
	if _, err := ProbeDevice(context.Background(), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("ProbeDevice on a missing path returned no error")
	}
	if _, err := ProbeDevice(context.Background(), t.TempDir()); err == nil {
		t.Fatal("ProbeDevice on a directory returned no error")
	}
}

func TestProbeShortAndGarbage(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{0, 1, 10, 511, 512, 513, 1080, 2047, 4095, 4096, 8191, 65536 + 0x47, 65536 + 0x48, 200000} {
		for round := 0; round < 20; round++ {
			b := make([]byte, n)
			rng.Read(b)
			if round%2 == 0 && n >= 512 {
				b[510], b[511] = 0x55, 0xAA
			}
			if _, err := Probe(bytes.NewReader(b), int64(n)); err != nil {
				t.Fatalf("Probe(%d random bytes): %v", n, err)
			}
		}
	}
	// Magic right at the end of a too-short input must not be read past it.
	b := []byte("_BHRfS_M")
	if sigs, err := Probe(bytes.NewReader(b), int64(len(b))); err != nil || len(sigs) != 0 {
		t.Fatalf("Probe(8 bytes) = %v, %v", sigs, err)
	}
}

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

// sparseImage is an image made of head at 0, tail at the end and zeros
// in between: the shape of a real device without its bulk.
type sparseImage struct {
	head, tail []byte
	size       int64
}

func newSparse(head, tail []byte, gap uint32) *sparseImage {
	return &sparseImage{head: head, tail: tail, size: int64(len(head)) + int64(gap) + int64(len(tail))}
}

func (s *sparseImage) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= s.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), s.size-off))
	clear(p[:n])
	for i := 0; i < n; i++ {
		pos := off + int64(i)
		if pos < int64(len(s.head)) {
			p[i] = s.head[pos]
		} else if t := pos - (s.size - int64(len(s.tail))); t >= 0 {
			p[i] = s.tail[t]
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func FuzzProbe(f *testing.F) {
	f.Add([]byte{}, []byte{}, uint32(0))
	f.Add([]byte("XFSB"), []byte{}, uint32(1<<20))
	f.Add(append(make([]byte, 510), 0x55, 0xAA), []byte("EFI PART"), uint32(1<<20-8))
	f.Fuzz(func(t *testing.T, head, tail []byte, gap uint32) {
		img := newSparse(head, tail, gap)
		sigs, err := Probe(img, img.size)
		if err != nil {
			t.Fatalf("Probe: %v", err)
		}
		again, err := Probe(img, img.size)
		if err != nil || !slices.Equal(sigs, again) {
			t.Fatalf("Probe is not deterministic: %v vs %v (%v)", sigs, again, err)
		}
		for _, s := range sigs {
			if s.Type == "" || s.Usage == "" || s.Source != SourceVolumed || s.Offset < 0 || s.Offset >= img.size {
				t.Fatalf("bad signature %+v for size %d", s, img.size)
			}
		}
		if !slices.ContainsFunc(head, func(b byte) bool { return b != 0 }) &&
			!slices.ContainsFunc(tail, func(b byte) bool { return b != 0 }) && len(sigs) != 0 {
			t.Fatalf("all-zero image gave %+v", sigs)
		}
	})
}

// fuzzSeeds are the shapes in testdata/fuzz/FuzzProbe: the first and
// last 4 KiB of real images, with the zeros around them folded into the
// gap, and the type each must still probe as.
func fuzzSeeds(t *testing.T) map[string]struct {
	make func(img string)
	want string
} {
	type seed = struct {
		make func(img string)
		want string
	}
	return map[string]seed{
		"ext4":  {func(img string) { runCmd(t, "", "mkfs.ext4", "-q", "-F", img) }, "ext4"},
		"ext3":  {func(img string) { runCmd(t, "", "mke2fs", "-q", "-F", "-t", "ext3", img) }, "ext3"},
		"xfs":   {func(img string) { runCmd(t, "", "mkfs.xfs", "-q", img) }, "xfs"},
		"vfat":  {func(img string) { runCmd(t, "", "mkfs.vfat", "-F", "32", img) }, "vfat"},
		"swap":  {func(img string) { runCmd(t, "", "mkswap", img) }, "swap"},
		"gpt":   {func(img string) { writeGPT(t, img, fuzzSeedSize, 512) }, "gpt"},
		"gpt4k": {func(img string) { writeGPT(t, img, fuzzSeedSize, 4096) }, "gpt"},
		"gpt-backup-only": {func(img string) {
			writeGPT(t, img, fuzzSeedSize, 512)
			writeAt(t, img, 0, make([]byte, mib))
		}, "gpt"},
		"md-1.1": {func(img string) {
			writeAt(t, img, 0, binary.LittleEndian.AppendUint32(nil, 0xa92b4efc))
		}, "linux_raid_member"},
		"luks1": {func(img string) { writeAt(t, img, 0, []byte("LUKS\xba\xbe\x00\x01")) }, "crypto_LUKS"},
	}
}

const fuzzSeedSize = 320 * mib

// TestFuzzSeeds checks that every committed seed still has the shape it
// was made from; with -write-seeds it first regenerates them from real
// images.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzProbe")
	if *writeSeeds {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, seed := range fuzzSeeds(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if *writeSeeds {
				img := image(t, name+".img", fuzzSeedSize)
				seed.make(img)
				data, err := os.ReadFile(img)
				if err != nil {
					t.Fatal(err)
				}
				head := bytes.TrimRight(data[:4096], "\x00")
				tail := bytes.TrimLeft(data[len(data)-4096:], "\x00")
				gap := uint32(len(data) - len(head) - len(tail))
				body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\nuint32(%d)\n", head, tail, gap)
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			body, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("seed missing (regenerate with -write-seeds): %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(body)), "\n")
			if len(lines) != 4 || lines[0] != "go test fuzz v1" {
				t.Fatalf("malformed seed file %s", path)
			}
			unquote := func(line, prefix string) string {
				v, ok := strings.CutPrefix(line, prefix+"(")
				if !ok || !strings.HasSuffix(v, ")") {
					t.Fatalf("seed %s: bad line %q", path, line)
				}
				v = strings.TrimSuffix(v, ")")
				if prefix == "uint32" {
					return v
				}
				s, err := strconv.Unquote(v)
				if err != nil {
					t.Fatalf("seed %s: %v", path, err)
				}
				return s
			}
			gap, err := strconv.ParseUint(unquote(lines[3], "uint32"), 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			img := newSparse([]byte(unquote(lines[1], "[]byte")), []byte(unquote(lines[2], "[]byte")), uint32(gap))
			if img.size != fuzzSeedSize {
				t.Errorf("seed %s describes %d bytes, want %d", name, img.size, fuzzSeedSize)
			}
			sigs, err := Probe(img, img.size)
			if err != nil {
				t.Fatal(err)
			}
			if got := types(sigs, SourceVolumed); !slices.Equal(got, []string{seed.want}) {
				t.Fatalf("seed %s probes as %v, want [%s]", name, got, seed.want)
			}
		})
	}
}

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
			if err != nil || info.UUID != uuid || info.EverMounted {
				t.Fatalf("Inspect = %+v, %v; want UUID %s, never mounted", info, err, uuid)
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

// countingReader counts reads, which the probe makes concurrently.
type countingReader struct {
	r            io.ReaderAt
	mu           sync.Mutex
	reads, bytes int
}

func (c *countingReader) ReadAt(b []byte, off int64) (int, error) {
	c.mu.Lock()
	c.reads++
	c.bytes += len(b)
	c.mu.Unlock()
	return c.r.ReadAt(b, off)
}

// slowReader takes a while for each read, as a cold device does, and
// counts how many reads overlap.
type slowReader struct {
	r              io.ReaderAt
	mu             sync.Mutex
	inFlight, most int
}

func (s *slowReader) ReadAt(b []byte, off int64) (int, error) {
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return s.r.ReadAt(b, off)
}

// The probe's reads of a device go out together, not one after another:
// each is a round trip through the device's driver (a loop device's
// worker), and a dozen in a row made the probe slower than the mount
// after it. What it finds is the same.
func TestProbeReadsAtOnce(t *testing.T) {
	dev := make([]byte, 64*mib)
	s := &slowReader{r: bytes.NewReader(dev)}
	if sigs, err := Probe(s, int64(len(dev))); err != nil || len(sigs) != 0 {
		t.Fatalf("Probe(blank) = %v, %v", sigs, err)
	}
	if s.most < 4 {
		t.Errorf("at most %d reads of the probe overlapped, want the windows read together", s.most)
	}
	// A magic in a window read ahead is still found, at its offset.
	copy(dev[0x200000:], "SKUL\xba\xbe")
	sigs, err := Probe(&slowReader{r: bytes.NewReader(dev)}, int64(len(dev)))
	if err != nil || len(sigs) != 1 || sigs[0].Type != "crypto_LUKS" || sigs[0].Offset != 0x200000 {
		t.Errorf("Probe found %+v, %v; want the LUKS2 secondary header at 2 MiB", sigs, err)
	}
}

// The probe reads around the page cache: what it cached was dropped
// again by the mount that follows (it sets the device's block size), and
// probe plus mount of a loop device took two to three times the mount
// alone. It still finds the filesystem.
func TestProbeDeviceLeavesNoPageCache(t *testing.T) {
	need(t, "mkfs.ext4")
	img := image(t, "probe.img", 16*mib)
	runCmd(t, "", "mkfs.ext4", "-q", "-F", img)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 64*kib, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Munmap(m); err != nil {
			t.Error(err)
		}
	}()
	resident := func() int {
		vec := make([]byte, 64*kib/os.Getpagesize())
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatal(errno)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	if n := resident(); n != 0 {
		t.Fatalf("%d pages still cached before the probe", n)
	}
	// As the agent asks: blkid, which reads through the cache, only for
	// what looks blank.
	sigs, err := ProbeDeviceWith(context.Background(), img, ProbeOptions{BlkidOnlyIfBlank: true})
	if err != nil || len(sigs) == 0 || sigs[0].Type != "ext4" {
		t.Fatalf("ProbeDevice = %+v, %v; want ext4", sigs, err)
	}
	if n := resident(); n != 0 {
		t.Errorf("%d pages of the probed first 64 KiB are in the page cache; want the probe to read around it", n)
	}
}

// Each read of a cold device is a round trip through its driver: the
// probe of a blank device reads each window of it once, not once per
// magic (it made 35 reads), and still finds what lies anywhere in
// a window.
func TestProbeReadsEachWindowOnce(t *testing.T) {
	dev := make([]byte, 64*mib)
	c := &countingReader{r: bytes.NewReader(dev)}
	if sigs, err := Probe(c, int64(len(dev))); err != nil || len(sigs) != 0 {
		t.Fatalf("Probe(blank) = %v, %v", sigs, err)
	}
	if c.reads > 12 {
		t.Errorf("the probe of a blank device made %d reads, want at most 12", c.reads)
	}
	// Far from the start magics lie alone: a 64 KiB window read for
	// each made the probe read 576 KiB of every device.
	if c.bytes > 128*kib {
		t.Errorf("the probe of a blank device read %d KiB, want at most 128", c.bytes/kib)
	}
	copy(dev[1024+0x38:], []byte{0x53, 0xEF}) // ext2/3/4 magic
	sigs, err := Probe(bytes.NewReader(dev), int64(len(dev)))
	if err != nil || len(sigs) == 0 {
		t.Fatalf("Probe found %v, %v; want the ext superblock at 1024", sigs, err)
	}
}

package blockfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

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

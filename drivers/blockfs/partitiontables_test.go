package blockfs

// The probe finds partition tables, the GPT backup at the end included.

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"testing"
)

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

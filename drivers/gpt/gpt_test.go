package gpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/testtool"
)

const mib = 1 << 20

// image is a disk image in a temp file.
func image(t *testing.T, size int64) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return f
}

func sampleEntries(ss int) []Entry {
	per := uint64(mib / ss)
	return []Entry{
		{Index: 1, Type: TypeVolumed, FirstLBA: per, LastLBA: 5*per - 1, Name: "data"},
		{Index: 2, Type: TypeVolumed, FirstLBA: 5 * per, LastLBA: 9*per - 1, Name: "logs-ünïcode"},
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		f := image(t, 16*mib)
		guid := NewDiskGUID()
		want := sampleEntries(ss)
		if err := Write(f, 16*mib, ss, guid, want); err != nil {
			t.Fatalf("ss %d: Write: %v", ss, err)
		}
		tab, err := Read(f, 16*mib, ss)
		if err != nil {
			t.Fatalf("ss %d: Read: %v", ss, err)
		}
		if !tab.PrimaryValid || !tab.BackupValid || !tab.Agree || !tab.ProtectiveMBR || !tab.Standard() {
			t.Fatalf("ss %d: table %+v: want both headers valid and agreeing, a protective MBR, the standard layout", ss, tab)
		}
		if tab.Header.DiskGUID != strings.ToUpper(guid) {
			t.Errorf("ss %d: disk GUID %s, want %s", ss, tab.Header.DiskGUID, guid)
		}
		first, last, _ := Usable(16*mib, ss)
		if tab.Header.FirstUsable != first || tab.Header.LastUsable != last {
			t.Errorf("ss %d: usable %d-%d, Usable says %d-%d", ss, tab.Header.FirstUsable, tab.Header.LastUsable, first, last)
		}
		if len(tab.Entries) != 2 {
			t.Fatalf("ss %d: entries %+v", ss, tab.Entries)
		}
		for i, e := range tab.Entries {
			w := want[i]
			if e.Index != w.Index || e.Type != w.Type || e.FirstLBA != w.FirstLBA || e.LastLBA != w.LastLBA || e.Name != w.Name || len(e.GUID) != 36 {
				t.Errorf("ss %d: entry %+v, want %+v with a GUID", ss, e, w)
			}
		}
	}
}

// Other tools accept what Write produces.
func TestWriteCheckedBySgdisk(t *testing.T) {
	sgdisk := testtool.Need(t, "Debian: gdisk", "sgdisk")[0]
	f := image(t, 16*mib)
	if err := Write(f, 16*mib, 512, NewDiskGUID(), sampleEntries(512)); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sgdisk, "-v", f.Name()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No problems found") {
		t.Fatalf("sgdisk -v: %v\n%s", err, out)
	}
	out, err = exec.Command(sgdisk, "-i", "2", f.Name()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), TypeVolumed) || !strings.Contains(string(out), "'logs-ünïcode'") {
		t.Fatalf("sgdisk -i 2: %v\n%s", err, out)
	}
}

// A table written by sgdisk (another tool) reads back the same.
func TestReadSgdiskTable(t *testing.T) {
	sgdisk := testtool.Need(t, "Debian: gdisk", "sgdisk")[0]
	f := image(t, 16*mib)
	if out, err := exec.Command(sgdisk, "-n", "1:2048:+4M", "-t", "1:8300", "-c", "1:root", "-n", "3:0:0", "-c", "3:rest", f.Name()).CombinedOutput(); err != nil {
		t.Fatalf("sgdisk: %v\n%s", err, out)
	}
	tab, err := Read(f, 16*mib, 512)
	if err != nil {
		t.Fatal(err)
	}
	if !tab.Agree || len(tab.Entries) != 2 || tab.Entries[0].Name != "root" || tab.Entries[0].Type != "0FC63DAF-8483-4772-8E79-3D69D8477DE4" ||
		tab.Entries[0].FirstLBA != 2048 || tab.Entries[0].LastLBA != 2048+8192-1 || tab.Entries[1].Index != 3 || tab.Entries[1].Name != "rest" {
		t.Fatalf("read %+v", tab)
	}
}

// sampleDisk is an image of size bytes holding the sample table.
func sampleDisk(t *testing.T, size int64) *os.File {
	f := image(t, size)
	if err := Write(f, size, 512, NewDiskGUID(), sampleEntries(512)); err != nil {
		t.Fatal(err)
	}
	return f
}

func poke(t *testing.T, f *os.File, off int64, b []byte) {
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestReadDamage(t *testing.T) {
	const size = 16 * mib
	setup := func(t *testing.T) *os.File { return sampleDisk(t, size) }
	last := int64(size - 512)

	t.Run("blank", func(t *testing.T) {
		if _, err := Read(image(t, size), size, 512); !errors.Is(err, ErrNoGPT) {
			t.Fatalf("Read(blank) = %v, want ErrNoGPT", err)
		}
	})
	t.Run("primary header CRC", func(t *testing.T) {
		f := setup(t)
		poke(t, f, 512+40, []byte{0xff}) // first usable LBA, CRC not updated
		tab, err := Read(f, size, 512)
		if err != nil || tab.PrimaryValid || !tab.BackupValid || tab.Header.MyLBA != uint64(last/512) || len(tab.Entries) != 2 {
			t.Fatalf("Read = %+v, %v; want the backup's table", tab, err)
		}
		if !strings.Contains(tab.PrimaryErr.Error(), "header CRC") {
			t.Errorf("PrimaryErr = %v", tab.PrimaryErr)
		}
	})
	t.Run("primary array CRC", func(t *testing.T) {
		f := setup(t)
		poke(t, f, 1024+56, []byte{'X'}) // first entry's name
		tab, err := Read(f, size, 512)
		if err != nil || tab.PrimaryValid || !tab.BackupValid || tab.Entries[0].Name != "data" {
			t.Fatalf("Read = %+v, %v; want the backup's table", tab, err)
		}
	})
	t.Run("backup gone", func(t *testing.T) {
		f := setup(t)
		poke(t, f, last, make([]byte, 512))
		tab, err := Read(f, size, 512)
		if err != nil || !tab.PrimaryValid || tab.BackupValid || tab.Agree {
			t.Fatalf("Read = %+v, %v; want the primary only", tab, err)
		}
	})
	t.Run("both gone", func(t *testing.T) {
		f := setup(t)
		poke(t, f, 512+40, []byte{0xff})
		poke(t, f, last+40, []byte{0xff})
		_, err := Read(f, size, 512)
		if err == nil || errors.Is(err, ErrNoGPT) || !strings.Contains(err.Error(), "primary header") || !strings.Contains(err.Error(), "backup header") {
			t.Fatalf("Read = %v; want both problems named", err)
		}
	})
	t.Run("headers disagree", func(t *testing.T) {
		f := setup(t)
		// A valid backup describing one partition only: what a crash
		// between the backup and the primary write leaves.
		g := image(t, size)
		if err := Write(g, size, 512, NewDiskGUID(), sampleEntries(512)[:1]); err != nil {
			t.Fatal(err)
		}
		tail := make([]byte, 33*512)
		if _, err := g.ReadAt(tail, size-33*512); err != nil {
			t.Fatal(err)
		}
		poke(t, f, size-33*512, tail)
		tab, err := Read(f, size, 512)
		if err != nil || !tab.PrimaryValid || !tab.BackupValid || tab.Agree || len(tab.Entries) != 2 {
			t.Fatalf("Read = %+v, %v; want both valid, not agreeing, the primary's entries", tab, err)
		}
	})
}

func TestReadResized(t *testing.T) {
	const size = 16 * mib
	setup := func(t *testing.T) *os.File { return sampleDisk(t, size) }
	last := int64(size - 512)

	t.Run("disk grew", func(t *testing.T) {
		f := setup(t)
		if err := f.Truncate(2 * size); err != nil {
			t.Fatal(err)
		}
		tab, err := Read(f, 2*size, 512)
		if err != nil || !tab.PrimaryValid || !tab.BackupValid || !tab.Agree || tab.Header.AlternateLBA != uint64(last/512) {
			t.Fatalf("Read = %+v, %v; want the backup found where the primary says", tab, err)
		}
	})
	t.Run("disk shrank", func(t *testing.T) {
		f := setup(t)
		_, err := Read(f, size/2, 512)
		if err == nil {
			t.Fatal("Read of a table larger than the disk succeeded")
		}
	})
}

// hostile builds a 64 KiB image whose primary header is valid apart from
// what mutate changes (the CRCs are recomputed after it).
func hostile(mutate func(h []byte)) []byte {
	img := make([]byte, 128*512)
	h := img[512:1024]
	copy(h, signature)
	le := binary.LittleEndian
	le.PutUint32(h[8:], revision1)
	le.PutUint32(h[12:], 92)
	le.PutUint64(h[24:], 1)
	le.PutUint64(h[32:], 127)
	le.PutUint64(h[40:], 34)
	le.PutUint64(h[48:], 94)
	le.PutUint64(h[72:], 2)
	le.PutUint32(h[80:], 128)
	le.PutUint32(h[84:], 128)
	mutate(h)
	n := uint64(le.Uint32(h[80:])) * uint64(le.Uint32(h[84:]))
	if n <= uint64(len(img)-1024) {
		le.PutUint32(h[88:], crc32.ChecksumIEEE(img[1024:1024+n]))
	}
	clear(h[16:20])
	le.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
	return img
}

// Headers that would make a trusting reader loop, allocate without bound
// or read outside the disk are refused.
func TestReadHostileHeaders(t *testing.T) {
	le := binary.LittleEndian
	for name, mutate := range map[string]func(h []byte){
		"entry size 0":           func(h []byte) { le.PutUint32(h[84:], 0) },
		"entry size 1":           func(h []byte) { le.PutUint32(h[84:], 1) },
		"4G entries":             func(h []byte) { le.PutUint32(h[80:], 0xffffffff) },
		"4G-byte entries":        func(h []byte) { le.PutUint32(h[84:], 0x80000000) },
		"array past the end":     func(h []byte) { le.PutUint64(h[72:], 1<<60) },
		"array in usable space":  func(h []byte) { le.PutUint64(h[72:], 40) },
		"usable past the end":    func(h []byte) { le.PutUint64(h[48:], 1<<62) },
		"usable reversed":        func(h []byte) { le.PutUint64(h[40:], 100) },
		"header size 0":          func(h []byte) { le.PutUint32(h[12:], 0) },
		"header size 4G":         func(h []byte) { le.PutUint32(h[12:], 0xffffffff) },
		"header elsewhere":       func(h []byte) { le.PutUint64(h[24:], 5) },
		"alternate past the end": func(h []byte) { le.PutUint64(h[32:], 1<<63) },
	} {
		t.Run(name, func(t *testing.T) {
			img := hostile(mutate)
			tab, err := Read(bytes.NewReader(img), int64(len(img)), 512)
			if name == "alternate past the end" {
				// The primary is fine; only the backup is missing.
				if err != nil || !tab.PrimaryValid || tab.BackupValid {
					t.Fatalf("Read = %+v, %v", tab, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Read accepted the header: %+v", tab)
			}
		})
	}
}

func TestReadHostileEntries(t *testing.T) {
	le := binary.LittleEndian
	entry := func(img []byte, i int, first, last uint64) {
		e := img[1024+128*i:]
		copy(e, bytes.Repeat([]byte{0x11}, 32))
		le.PutUint64(e[32:], first)
		le.PutUint64(e[40:], last)
	}
	for name, set := range map[string]func(img []byte){
		"valid":               func(img []byte) { entry(img, 0, 40, 60); entry(img, 5, 61, 70) },
		"before first usable": func(img []byte) { entry(img, 0, 2, 40) },
		"after last usable":   func(img []byte) { entry(img, 0, 40, 95) },
		"reversed":            func(img []byte) { entry(img, 0, 50, 40) },
		"overlap":             func(img []byte) { entry(img, 0, 40, 60); entry(img, 5, 60, 70) },
	} {
		t.Run(name, func(t *testing.T) {
			img := hostile(func([]byte) {})
			set(img)
			h := img[512:1024]
			le.PutUint32(h[88:], crc32.ChecksumIEEE(img[1024:1024+128*128]))
			clear(h[16:20])
			le.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
			tab, err := Read(bytes.NewReader(img), int64(len(img)), 512)
			if name == "valid" {
				if err != nil || len(tab.Entries) != 2 || tab.Entries[1].Index != 6 {
					t.Fatalf("Read = %+v, %v", tab, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "partition") {
				t.Fatalf("Read = %+v, %v; want the entries refused", tab, err)
			}
		})
	}
}

func TestWriteRefuses(t *testing.T) {
	f := image(t, 16*mib)
	_, last, _ := Usable(16*mib, 512)
	long := strings.Repeat("𝄞", 19) // 38 UTF-16 units in 19 runes
	for name, es := range map[string][]Entry{
		"index 0":      {{Index: 0, Type: TypeVolumed, FirstLBA: 2048, LastLBA: 4095}},
		"index twice":  {{Index: 1, Type: TypeVolumed, FirstLBA: 2048, LastLBA: 4095}, {Index: 1, Type: TypeVolumed, FirstLBA: 4096, LastLBA: 8191}},
		"overlap":      {{Index: 1, Type: TypeVolumed, FirstLBA: 2048, LastLBA: 4095}, {Index: 2, Type: TypeVolumed, FirstLBA: 4095, LastLBA: 8191}},
		"past the end": {{Index: 1, Type: TypeVolumed, FirstLBA: 2048, LastLBA: last + 1}},
		"in the array": {{Index: 1, Type: TypeVolumed, FirstLBA: 10, LastLBA: 4095}},
		"long name":    {{Index: 1, Type: TypeVolumed, FirstLBA: 2048, LastLBA: 4095, Name: long}},
		"bad type":     {{Index: 1, Type: "linux", FirstLBA: 2048, LastLBA: 4095}},
	} {
		if err := Write(f, 16*mib, 512, NewDiskGUID(), es); err == nil {
			t.Errorf("%s: Write accepted %+v", name, es)
		}
	}
	all := make([]byte, 16*mib)
	if _, err := f.ReadAt(all, 0); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(all, func(b byte) bool { return b != 0 }) {
		t.Fatal("a refused Write wrote to the disk")
	}
}

// The protective MBR covers the disk, its size capped at 0xFFFFFFFF
// sectors past 2 TiB (UEFI 2.10, 5.2.3).
func TestProtectiveMBRSize(t *testing.T) {
	for _, c := range []struct {
		size int64
		want uint32
	}{{16 * mib, 16*mib/512 - 1}, {3 << 40, 0xFFFFFFFF}} {
		f := image(t, c.size)
		if err := Write(f, c.size, 512, NewDiskGUID(), sampleEntries(512)); err != nil {
			t.Fatal(err)
		}
		mbr := make([]byte, 512)
		if _, err := f.ReadAt(mbr, 0); err != nil {
			t.Fatal(err)
		}
		rec := mbr[0x1BE:]
		if rec[4] != 0xEE || binary.LittleEndian.Uint32(rec[8:]) != 1 || binary.LittleEndian.Uint32(rec[12:]) != c.want ||
			!bytes.Equal(mbr[0x1CE:0x1FE], make([]byte, 48)) || mbr[510] != 0x55 || mbr[511] != 0xAA {
			t.Errorf("disk of %d bytes: MBR records % x", c.size, mbr[0x1BE:])
		}
		tab, err := Read(f, c.size, 512)
		if err != nil || !tab.ProtectiveMBR || !tab.Agree {
			t.Errorf("disk of %d bytes: Read = %+v, %v", c.size, tab, err)
		}
	}
}

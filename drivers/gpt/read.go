// Package gpt reads and writes GUID partition tables.
//
// Reading is our own code: a disk's first and last sectors are untrusted
// input (any USB stick), and github.com/diskfs/go-diskfs v1.9.4's reader
// sizes its read by the header's entry count times entry size unchecked
// (2^31 entries of 2^31 bytes panic in makeslice, which would take the
// agent down; 16M entries of 128 bytes allocate 2 GiB before the read
// fails), reads the backup only when the primary is bad and never checks
// one against the other, and takes partitions outside the usable range
// or overlapping. Read bounds every size before it allocates, checks both
// headers and both CRCs, and reports what it found in each.
//
// Writing goes through go-diskfs (the backup array and header first, then
// the primary ones, each synced), after a protective MBR of our own, for
// the standard layout only: 128 entries of 128 bytes, the primary array
// at LBA 2.
package gpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"unicode/utf16"
)

// TypeVolumed is the partition type GUID of every partition volumed
// creates. A GPT all of whose partitions carry it is volumed's to extend.
const TypeVolumed = "1C92E329-DEDA-417F-BE4D-9641A1C7BAD9"

// ErrNoGPT: neither header carries the GPT signature.
var ErrNoGPT = errors.New("no GPT")

const (
	signature   = "EFI PART"
	revision1   = 0x00010000
	minHdrSize  = 92
	entryBytes  = 128
	stdEntries  = 128
	maxArrayLen = 1 << 20 // no real table is larger; bounds what a hostile header makes us read
	// MaxNameUnits is the room a partition name has: 36 UTF-16 code units.
	MaxNameUnits = 36
)

// Header is one GPT header as found on disk.
type Header struct {
	MyLBA, AlternateLBA       uint64
	FirstUsable, LastUsable   uint64
	DiskGUID                  string // upper case
	EntriesLBA                uint64
	NumEntries, EntrySize     uint32
	EntriesCRC                uint32
	entries                   []Entry
	headerCRCOK, entriesCRCOK bool
}

// Entry is a used partition entry.
type Entry struct {
	Index      int    // 1-based slot in the array; the kernel's partition number
	Type       string // type GUID, upper case
	GUID       string // unique partition GUID, upper case
	FirstLBA   uint64
	LastLBA    uint64 // inclusive
	Attributes uint64
	Name       string
}

// Sectors is the length of the partition in logical sectors.
func (e Entry) Sectors() uint64 { return e.LastLBA - e.FirstLBA + 1 }

// Table is what Read found.
type Table struct {
	SectorSize int
	// Header is the header the table was taken from: the primary when it
	// is valid (as the kernel does), else the backup.
	Header  Header
	Entries []Entry // used entries, by Index
	// Which copies are valid, and why not; Agree says both are valid and
	// describe the same partitions (a crash while writing leaves them apart).
	PrimaryValid, BackupValid bool
	PrimaryErr, BackupErr     error
	Agree                     bool
	// ProtectiveMBR: LBA 0 holds exactly one partition, of type 0xEE,
	// starting at LBA 1 (and no boot code signature of anything else).
	ProtectiveMBR bool
	// EmptyMBR: LBA 0 is all zeros, no MBR at all (what a write of a GPT
	// to a blank disk cut before its protective MBR leaves).
	EmptyMBR bool
}

// Standard reports whether the table has the layout Write produces: 128
// entries of 128 bytes, the primary array at LBA 2, the first usable LBA
// right after it. Only such a table is rewritten; a rewrite keeps its
// partitions exactly where they are.
func (t *Table) Standard() bool {
	h := t.Header
	arraySectors := uint64(stdEntries * entryBytes / t.SectorSize)
	return h.NumEntries == stdEntries && h.EntrySize == entryBytes && h.FirstUsable == 2+arraySectors &&
		(h.MyLBA == 1 && h.EntriesLBA == 2 || h.MyLBA != 1 && h.EntriesLBA == h.MyLBA-arraySectors)
}

// Read reads the GPT of a disk of size bytes with the given logical
// sector size (512 or 4096). It returns ErrNoGPT when neither the primary
// header nor the backup carries the signature, and an error naming both
// problems when neither is valid.
func Read(r io.ReaderAt, size int64, sectorSize int) (*Table, error) {
	if sectorSize != 512 && sectorSize != 4096 {
		return nil, fmt.Errorf("gpt: sector size %d: want 512 or 4096", sectorSize)
	}
	if size < 0 {
		return nil, fmt.Errorf("gpt: negative disk size %d", size)
	}
	sectors := uint64(size) / uint64(sectorSize)
	if sectors < 3 {
		return nil, ErrNoGPT
	}
	rd := reader{r: r, ss: uint64(sectorSize), sectors: sectors}
	t := &Table{SectorSize: sectorSize}

	primary, pFound, pErr := rd.header(1)
	t.PrimaryValid = pErr == nil && pFound
	// The backup is where the primary says; with the primary gone, at
	// the last LBA (where a disk that grew no longer has it).
	backupLBA := sectors - 1
	if t.PrimaryValid {
		backupLBA = primary.AlternateLBA
	}
	backup, bFound, bErr := rd.header(backupLBA)
	t.BackupValid = bErr == nil && bFound
	if !pFound && !bFound {
		return nil, ErrNoGPT
	}
	if !pFound {
		pErr = errors.New("no signature at LBA 1")
	}
	if !bFound {
		bErr = fmt.Errorf("no signature at LBA %d", backupLBA)
	}
	t.PrimaryErr, t.BackupErr = pErr, bErr
	if t.PrimaryValid && t.BackupValid {
		switch {
		case backup.AlternateLBA != 1:
			t.BackupValid, t.BackupErr = false, fmt.Errorf("backup header at LBA %d points at LBA %d, not 1", backupLBA, backup.AlternateLBA)
		default:
			t.Agree = primary.DiskGUID == backup.DiskGUID && primary.FirstUsable == backup.FirstUsable &&
				primary.LastUsable == backup.LastUsable && primary.EntriesCRC == backup.EntriesCRC &&
				slices.Equal(primary.entries, backup.entries)
		}
	}
	switch {
	case t.PrimaryValid:
		t.Header = primary
	case t.BackupValid:
		t.Header = backup
	default:
		return nil, fmt.Errorf("gpt: primary header: %v; backup header: %v", pErr, bErr)
	}
	t.Entries = t.Header.entries
	t.Header.entries = nil
	mbr, err := rd.read(0, 1)
	if err != nil {
		return nil, err
	}
	t.ProtectiveMBR = protective(mbr)
	t.EmptyMBR = bytes.Equal(mbr, make([]byte, len(mbr)))
	return t, nil
}

type reader struct {
	r       io.ReaderAt
	ss      uint64
	sectors uint64
}

func (rd reader) read(lba, n uint64) ([]byte, error) {
	if lba >= rd.sectors || n > rd.sectors-lba {
		return nil, fmt.Errorf("gpt: LBA %d+%d is past the end of the disk (%d sectors)", lba, n, rd.sectors)
	}
	b := make([]byte, n*rd.ss)
	if _, err := rd.r.ReadAt(b, int64(lba*rd.ss)); err != nil {
		return nil, fmt.Errorf("gpt: read LBA %d: %w", lba, err)
	}
	return b, nil
}

// header reads and checks the header at lba and its entry array. found
// is false when the sector does not carry the signature; err says why a
// header that does is not valid. A read failure is returned as err with
// found true: could not look is never "not there".
func (rd reader) header(lba uint64) (h Header, found bool, err error) {
	if lba == 0 || lba >= rd.sectors {
		return h, false, nil
	}
	b, err := rd.read(lba, 1)
	if err != nil {
		return h, true, err
	}
	if string(b[:8]) != signature {
		return h, false, nil
	}
	le := binary.LittleEndian
	if rev := le.Uint32(b[8:]); rev != revision1 {
		return h, true, fmt.Errorf("revision %#x, want %#x", rev, revision1)
	}
	hs := le.Uint32(b[12:])
	if hs < minHdrSize || uint64(hs) > rd.ss {
		return h, true, fmt.Errorf("header size %d", hs)
	}
	sum := le.Uint32(b[16:])
	hdr := bytes.Clone(b[:hs])
	clear(hdr[16:20])
	if crc32.ChecksumIEEE(hdr) != sum {
		return h, true, fmt.Errorf("header CRC mismatch at LBA %d", lba)
	}
	h = Header{
		MyLBA: le.Uint64(b[24:]), AlternateLBA: le.Uint64(b[32:]),
		FirstUsable: le.Uint64(b[40:]), LastUsable: le.Uint64(b[48:]),
		DiskGUID:   guidString(b[56:72]),
		EntriesLBA: le.Uint64(b[72:]), NumEntries: le.Uint32(b[80:]), EntrySize: le.Uint32(b[84:]),
		EntriesCRC: le.Uint32(b[88:]), headerCRCOK: true,
	}
	arrayLen := uint64(h.NumEntries) * uint64(h.EntrySize)
	switch {
	case h.MyLBA != lba:
		return h, true, fmt.Errorf("header at LBA %d says it is at LBA %d", lba, h.MyLBA)
	case h.EntrySize < entryBytes || h.EntrySize%entryBytes != 0 || h.EntrySize&(h.EntrySize-1) != 0:
		return h, true, fmt.Errorf("entry size %d", h.EntrySize)
	case h.NumEntries == 0 || arrayLen > maxArrayLen:
		return h, true, fmt.Errorf("%d entries of %d bytes", h.NumEntries, h.EntrySize)
	case h.FirstUsable > h.LastUsable || h.LastUsable >= rd.sectors:
		return h, true, fmt.Errorf("usable LBAs %d-%d on a disk of %d sectors", h.FirstUsable, h.LastUsable, rd.sectors)
	}
	arraySectors := (arrayLen + rd.ss - 1) / rd.ss
	// The array lies outside the usable range, on the header's side.
	if lba == 1 && (h.EntriesLBA < 2 || h.EntriesLBA > h.FirstUsable || arraySectors > h.FirstUsable-h.EntriesLBA) ||
		lba != 1 && (h.EntriesLBA <= h.LastUsable || h.EntriesLBA >= lba || arraySectors > lba-h.EntriesLBA) {
		return h, true, fmt.Errorf("entry array at LBA %d (%d sectors) overlaps the usable LBAs %d-%d or the header", h.EntriesLBA, arraySectors, h.FirstUsable, h.LastUsable)
	}
	arr, err := rd.read(h.EntriesLBA, arraySectors)
	if err != nil {
		return h, true, err
	}
	arr = arr[:arrayLen]
	if crc32.ChecksumIEEE(arr) != h.EntriesCRC {
		return h, true, fmt.Errorf("entry array CRC mismatch (header at LBA %d)", lba)
	}
	h.entriesCRCOK = true
	h.entries, err = parseEntries(arr, int(h.EntrySize), h.FirstUsable, h.LastUsable)
	return h, true, err
}

var zeroGUID [16]byte

func parseEntries(arr []byte, size int, first, last uint64) ([]Entry, error) {
	le := binary.LittleEndian
	var out []Entry
	for i := 0; (i+1)*size <= len(arr); i++ {
		e := arr[i*size : (i+1)*size]
		if bytes.Equal(e[:16], zeroGUID[:]) {
			continue
		}
		en := Entry{
			Index: i + 1, Type: guidString(e[0:16]), GUID: guidString(e[16:32]),
			FirstLBA: le.Uint64(e[32:]), LastLBA: le.Uint64(e[40:]), Attributes: le.Uint64(e[48:]),
			Name: decodeName(e[56:128]),
		}
		if en.FirstLBA > en.LastLBA || en.FirstLBA < first || en.LastLBA > last {
			return nil, fmt.Errorf("partition %d spans LBAs %d-%d, outside the usable %d-%d", en.Index, en.FirstLBA, en.LastLBA, first, last)
		}
		for _, o := range out {
			if en.FirstLBA <= o.LastLBA && o.FirstLBA <= en.LastLBA {
				return nil, fmt.Errorf("partitions %d and %d overlap", o.Index, en.Index)
			}
		}
		out = append(out, en)
	}
	return out, nil
}

func decodeName(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

// NameUnits is how many UTF-16 code units name takes in an entry.
func NameUnits(name string) int { return len(utf16.Encode([]rune(name))) }

// guidString renders GPT's mixed-endian GUID bytes in the usual form.
func guidString(b []byte) string {
	return strings.ToUpper(fmt.Sprintf("%08x-%04x-%04x-%x-%x",
		binary.LittleEndian.Uint32(b[0:4]), binary.LittleEndian.Uint16(b[4:6]),
		binary.LittleEndian.Uint16(b[6:8]), b[8:10], b[10:16]))
}

func protective(mbr []byte) bool {
	if len(mbr) < 512 || mbr[510] != 0x55 || mbr[511] != 0xAA {
		return false
	}
	ee := 0
	for i := 0; i < 4; i++ {
		e := mbr[0x1BE+16*i : 0x1BE+16*(i+1)]
		switch {
		case e[4] == 0xEE && binary.LittleEndian.Uint32(e[8:]) == 1:
			ee++
		case !bytes.Equal(e, make([]byte, 16)):
			return false
		}
	}
	return ee == 1
}

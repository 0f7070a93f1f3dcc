package gpt

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"

	"github.com/diskfs/go-diskfs/backend"
	diskfs "github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// Usable returns the first and last LBA a standard table (128 entries of
// 128 bytes at each end) leaves for partitions on a disk of size bytes.
func Usable(size int64, sectorSize int) (first, last uint64, err error) {
	if sectorSize != 512 && sectorSize != 4096 {
		return 0, 0, fmt.Errorf("gpt: sector size %d: want 512 or 4096", sectorSize)
	}
	arraySectors := uint64(stdEntries * entryBytes / sectorSize)
	sectors := uint64(max(size, 0)) / uint64(sectorSize)
	first = 2 + arraySectors
	if sectors < 2*first+1 {
		return 0, 0, fmt.Errorf("gpt: a disk of %d bytes is too small for a partition table", size)
	}
	return first, sectors - 2 - arraySectors, nil
}

// NewDiskGUID returns a random disk GUID for a new table.
func NewDiskGUID() string { return uuid.NewString() }

// Write writes a standard GPT holding entries to w, a disk of size bytes:
// the backup array and header at the end of the disk (moved there if the
// disk grew) in one write, then the primary header and array in one
// write, then the protective MBR's partition records (the boot code area
// is left as it is), each synced before the next when w is an *os.File.
// An entry without a GUID gets a random one. Nothing is written when the
// entries do not fit the layout.
//
// Why this order, each side whole: a power cut between two writes must
// leave either nothing of ours or a GPT that reads. go-diskfs writes an
// array, then its header, and volumed wrote the MBR first: a cut after
// the MBR, or after the first array, left a blank disk with bytes and no
// table, which the blank rule refuses for good (a power cut in test/os
// TestPowerCut found it). Now a cut leaves the backup alone (read, the
// primary rewritten), both copies without the MBR (Table.EmptyMBR, the
// MBR written), or the whole table.
func Write(w backend.WritableFile, size int64, sectorSize int, diskGUID string, entries []Entry) error {
	first, last, err := Usable(size, sectorSize)
	if err != nil {
		return err
	}
	if _, err := uuid.Parse(diskGUID); err != nil {
		return fmt.Errorf("gpt: disk GUID %q: %w", diskGUID, err)
	}
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Entry) int { return a.Index - b.Index })
	t := &diskfs.Table{
		LogicalSectorSize: sectorSize, PhysicalSectorSize: sectorSize,
		GUID: diskGUID,
	}
	for i, e := range sorted {
		switch {
		case e.Index < 1 || e.Index > stdEntries || i > 0 && sorted[i-1].Index == e.Index:
			return fmt.Errorf("gpt: partition index %d: want a unique index in 1-%d", e.Index, stdEntries)
		case e.FirstLBA < first || e.LastLBA > last || e.FirstLBA > e.LastLBA:
			return fmt.Errorf("gpt: partition %d spans LBAs %d-%d, outside the usable %d-%d", e.Index, e.FirstLBA, e.LastLBA, first, last)
		case NameUnits(e.Name) > MaxNameUnits:
			return fmt.Errorf("gpt: partition %d name %q is longer than %d UTF-16 units", e.Index, e.Name, MaxNameUnits)
		}
		if _, err := uuid.Parse(e.Type); err != nil {
			return fmt.Errorf("gpt: partition %d type %q: %w", e.Index, e.Type, err)
		}
		for _, o := range sorted[:i] {
			if e.FirstLBA <= o.LastLBA && o.FirstLBA <= e.LastLBA {
				return fmt.Errorf("gpt: partitions %d and %d overlap", o.Index, e.Index)
			}
		}
		t.Partitions = append(t.Partitions, &diskfs.Partition{
			Index: e.Index, Start: e.FirstLBA, End: e.LastLBA,
			Type: diskfs.Type(e.Type), Name: e.Name, GUID: e.GUID, Attributes: e.Attributes,
		})
	}
	if err := writeSides(w, t, size, sectorSize); err != nil {
		return err
	}
	return writeProtectiveMBR(w, uint64(size)/uint64(sectorSize))
}

// writeProtectiveMBR writes LBA 0's partition records and signature (the
// boot code area before them is left as it is): one record of type 0xEE
// from LBA 1 over the disk, its size capped at 0xFFFFFFFF as the UEFI
// spec says. (go-diskfs truncates the size to 32 bits instead, which on
// a disk over 2 TiB gives a record that covers part of the disk.)
func writeProtectiveMBR(w backend.WritableFile, sectors uint64) error {
	rec := make([]byte, 4*16+2)
	copy(rec[1:4], []byte{0x00, 0x02, 0x00}) // CHS of LBA 1
	rec[4] = 0xEE
	copy(rec[5:8], []byte{0xFF, 0xFF, 0xFF}) // CHS beyond reach
	binary.LittleEndian.PutUint32(rec[8:], 1)
	binary.LittleEndian.PutUint32(rec[12:], uint32(min(sectors-1, 0xFFFFFFFF)))
	rec[64], rec[65] = 0x55, 0xAA
	if _, err := w.WriteAt(rec, 0x1BE); err != nil {
		return fmt.Errorf("gpt: write the protective MBR: %w", err)
	}
	if s, ok := w.(interface{ Sync() error }); ok {
		if err := s.Sync(); err != nil {
			return fmt.Errorf("gpt: sync the protective MBR: %w", err)
		}
	}
	return nil
}

// writeSides has go-diskfs encode the table on a sparse scratch file of
// the disk's size, then copies each side (header and array, contiguous
// in the standard layout) to w in one write, backup first, syncing after
// each.
func writeSides(w backend.WritableFile, t *diskfs.Table, size int64, sectorSize int) error {
	fd, err := unix.MemfdCreate("volumed-gpt", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("gpt: scratch file: %w", err)
	}
	scratch := os.NewFile(uintptr(fd), "volumed-gpt")
	defer scratch.Close()
	if err := scratch.Truncate(size); err != nil {
		return fmt.Errorf("gpt: scratch file: %w", err)
	}
	if err := t.Write(scratch, size); err != nil {
		return fmt.Errorf("gpt: %w", err)
	}
	ss := int64(sectorSize)
	side := (1 + int64(stdEntries*entryBytes)/ss) * ss
	sectors := size / ss
	for _, off := range []int64{(sectors-1)*ss - side + ss, ss} {
		buf := make([]byte, side)
		if _, err := scratch.ReadAt(buf, off); err != nil {
			return fmt.Errorf("gpt: scratch file: %w", err)
		}
		if _, err := w.WriteAt(buf, off); err != nil {
			return fmt.Errorf("gpt: write the table at byte %d: %w", off, err)
		}
		if s, ok := w.(interface{ Sync() error }); ok {
			if err := s.Sync(); err != nil {
				return fmt.Errorf("gpt: sync the table at byte %d: %w", off, err)
			}
		}
	}
	return nil
}

// Package logwrites reads the log of the kernel's dm-log-writes target
// (Documentation/admin-guide/device-mapper/log-writes.rst), replays it onto
// an image of the logged device, and lists the disks a power cut could
// have left: what was flushed is there, what was written since may or may
// not be (a volatile write cache keeps or drops any part of it).
//
// The layout, all little-endian: block 0 of the log holds the super
// (magic, version, nr_entries, sectorsize); then nr_entries entries follow,
// each a header block (sector, nr_sectors, flags, data_len, and for a mark
// its name) and, unless it is a discard, nr_sectors blocks of the data
// written. A block is sectorsize bytes, the logged device's logical block
// size; sector and nr_sectors count such blocks.
//
// The target logs a write only once a flush that followed its completion
// completed (or at once for a FUA write), in the order the writes
// completed: every entry before a FLUSH entry was on stable storage when
// that flush completed.
package logwrites

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Magic and Version are the super block's first two fields.
const (
	Magic   = 0x6a736677736872
	Version = 1
)

// Entry flags, as the target sets them from the bio.
const (
	FlagFlush    = 1 << 0 // REQ_PREFLUSH: everything logged before is durable
	FlagFUA      = 1 << 1 // REQ_FUA: this write is durable when it completes
	FlagDiscard  = 1 << 2 // a discard: no data follows
	FlagMark     = 1 << 3 // `dmsetup message DEV 0 mark NAME`
	FlagMetadata = 1 << 4 // REQ_META: only a hint
	knownFlags   = FlagFlush | FlagFUA | FlagDiscard | FlagMark | FlagMetadata
)

const (
	superLen  = 8 + 8 + 8 + 4
	headerLen = 4 * 8
	// maxBlock bounds the block size a super may claim: the kernel's
	// logical block sizes are 512 to 4096; 64 KiB leaves room.
	maxBlock = 64 << 10
)

// Entry is one logged operation.
type Entry struct {
	Index   int
	Sector  uint64 // first block written, in units of the log's BlockSize
	Sectors uint64 // blocks written (or discarded)
	Flags   uint64
	Mark    string // the mark's name, for a FlagMark entry
	// dataAt is the byte offset of the data in the log.
	dataAt int64
}

// Flush, FUA, Discard and IsMark read the entry's flags.
func (e Entry) Flush() bool   { return e.Flags&FlagFlush != 0 }
func (e Entry) FUA() bool     { return e.Flags&FlagFUA != 0 }
func (e Entry) Discard() bool { return e.Flags&FlagDiscard != 0 }
func (e Entry) IsMark() bool  { return e.Flags&FlagMark != 0 }

// Writes reports whether the entry changes the device's bytes.
func (e Entry) Writes() bool { return !e.IsMark() && e.Sectors > 0 }

func (e Entry) String() string {
	var f []string
	for _, n := range []struct {
		bit  uint64
		name string
	}{{FlagFlush, "FLUSH"}, {FlagFUA, "FUA"}, {FlagDiscard, "DISCARD"}, {FlagMark, "MARK"}, {FlagMetadata, "META"}} {
		if e.Flags&n.bit != 0 {
			f = append(f, n.name)
		}
	}
	if e.IsMark() {
		return fmt.Sprintf("#%d mark %q", e.Index, e.Mark)
	}
	return fmt.Sprintf("#%d %s sector %d+%d", e.Index, strings.Join(f, "|"), e.Sector, e.Sectors)
}

// Log is a parsed log; the data stays in the reader until it is replayed.
type Log struct {
	r         io.ReaderAt
	BlockSize int64
	Entries   []Entry
}

// Read parses the super and every entry header of a log of size bytes.
// A log that ends inside an entry, or an entry that makes no sense, is an
// error naming the entry; nothing is guessed.
func Read(r io.ReaderAt, size int64) (*Log, error) {
	var sb [superLen]byte
	if _, err := r.ReadAt(sb[:], 0); err != nil {
		return nil, fmt.Errorf("log super: %w", err)
	}
	le := binary.LittleEndian
	if m := le.Uint64(sb[0:]); m != Magic {
		return nil, fmt.Errorf("log super: magic %#x, want %#x (not a dm-log-writes log)", m, uint64(Magic))
	}
	if v := le.Uint64(sb[8:]); v != Version {
		return nil, fmt.Errorf("log super: version %d, want %d", v, Version)
	}
	n := le.Uint64(sb[16:])
	bs := int64(le.Uint32(sb[24:]))
	if bs < 512 || bs > maxBlock || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("log super: sectorsize %d is not a power of two from 512 to %d", bs, maxBlock)
	}
	// Each entry takes at least one block: a count beyond that is damage,
	// and must not size an allocation.
	if n > uint64(size/bs) {
		return nil, fmt.Errorf("log super: nr_entries %d, but a log of %d bytes holds at most %d", n, size, size/bs)
	}
	l := &Log{r: r, BlockSize: bs, Entries: make([]Entry, 0, n)}
	hdr := make([]byte, bs)
	pos := bs
	for i := 0; uint64(i) < n; i++ {
		e, next, err := l.readEntry(hdr, i, pos, size)
		if err != nil {
			return nil, err
		}
		l.Entries = append(l.Entries, e)
		pos = next
	}
	return l, nil
}

// readEntry parses the entry whose header block is at pos and returns it
// with the offset of the next one.
func (l *Log) readEntry(hdr []byte, i int, pos, size int64) (Entry, int64, error) {
	bs := l.BlockSize
	if pos+bs > size {
		return Entry{}, 0, fmt.Errorf("log entry %d: header at byte %d past the end of the log (%d bytes)", i, pos, size)
	}
	if _, err := l.r.ReadAt(hdr, pos); err != nil {
		return Entry{}, 0, fmt.Errorf("log entry %d: read header at byte %d: %w", i, pos, err)
	}
	le := binary.LittleEndian
	e := Entry{
		Index:   i,
		Sector:  le.Uint64(hdr[0:]),
		Sectors: le.Uint64(hdr[8:]),
		Flags:   le.Uint64(hdr[16:]),
		dataAt:  pos + bs,
	}
	dataLen := le.Uint64(hdr[24:])
	if e.Flags&^knownFlags != 0 {
		return Entry{}, 0, fmt.Errorf("log entry %d: unknown flags %#x", i, e.Flags&^knownFlags)
	}
	if e.IsMark() {
		if dataLen > uint64(bs-headerLen) || e.Sectors != 0 {
			return Entry{}, 0, fmt.Errorf("log entry %d: mark of %d bytes and %d sectors (at most %d bytes, no sectors)", i, dataLen, e.Sectors, bs-headerLen)
		}
		e.Mark = string(hdr[headerLen : headerLen+dataLen])
		return e, pos + bs, nil
	}
	if dataLen != 0 {
		return Entry{}, 0, fmt.Errorf("log entry %d: data_len %d on an entry that is not a mark", i, dataLen)
	}
	if e.Sectors > uint64(1<<63-1)/uint64(bs) || e.Sector > uint64(1<<63-1)/uint64(bs)-e.Sectors {
		return Entry{}, 0, fmt.Errorf("log entry %d: sector %d+%d out of range", i, e.Sector, e.Sectors)
	}
	if e.Discard() {
		return e, pos + bs, nil
	}
	data := int64(e.Sectors) * bs
	if data > size-e.dataAt {
		return Entry{}, 0, fmt.Errorf("log entry %d: %d blocks of data at byte %d past the end of the log (%d bytes)", i, e.Sectors, e.dataAt, size)
	}
	return e, e.dataAt + data, nil
}

// Data returns the bytes the entry wrote (nil for a discard or a mark).
func (l *Log) Data(e Entry) ([]byte, error) {
	if !e.Writes() || e.Discard() {
		return nil, nil
	}
	b := make([]byte, int64(e.Sectors)*l.BlockSize)
	if _, err := l.r.ReadAt(b, e.dataAt); err != nil {
		return nil, fmt.Errorf("log entry %d: read data: %w", e.Index, err)
	}
	return b, nil
}

// Mark returns the index of the first mark entry named name.
func (l *Log) Mark(name string) (int, error) {
	for _, e := range l.Entries {
		if e.IsMark() && e.Mark == name {
			return e.Index, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrNoMark, name)
}

// ErrNoMark: the log has no mark of that name.
var ErrNoMark = errors.New("no such mark in the log")

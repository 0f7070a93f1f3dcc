package logwrites

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Apply writes one entry onto dst, an image of the logged device: its data
// at its sector, or for a discard a hole (which reads as zeros, as a
// device that zeroes discarded blocks would). Marks and bare flushes
// change nothing. A write past the end of dst is an error: dst must be as
// large as the logged device.
func (l *Log) Apply(dst *os.File, e Entry) error {
	if !e.Writes() {
		return nil
	}
	off := int64(e.Sector) * l.BlockSize
	n := int64(e.Sectors) * l.BlockSize
	fi, err := dst.Stat()
	if err != nil {
		return err
	}
	if off+n > fi.Size() {
		return fmt.Errorf("log entry %d: writes bytes %d to %d of an image of %d", e.Index, off, off+n, fi.Size())
	}
	if e.Discard() {
		return discard(dst, off, n)
	}
	// Copy through a bounded buffer: an entry may be megabytes long.
	src := io.NewSectionReader(l.r, e.dataAt, n)
	if _, err := io.Copy(io.NewOffsetWriter(dst, off), src); err != nil {
		return fmt.Errorf("log entry %d: %w", e.Index, err)
	}
	return nil
}

// discard punches a hole; a filesystem that cannot gets zeros written.
func discard(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil || !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	zero := make([]byte, 1<<20)
	for n > 0 {
		c := min(n, int64(len(zero)))
		if _, err := f.WriteAt(zero[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

// Replay applies entries [from, to) onto dst in log order, leaving out the
// ones drop names (a volatile cache lost them).
func (l *Log) Replay(dst *os.File, from, to int, drop map[int]bool) error {
	if from < 0 || to > len(l.Entries) || from > to {
		return fmt.Errorf("replay entries %d to %d of a log of %d", from, to, len(l.Entries))
	}
	for _, e := range l.Entries[from:to] {
		if drop[e.Index] {
			continue
		}
		if err := l.Apply(dst, e); err != nil {
			return err
		}
	}
	return nil
}

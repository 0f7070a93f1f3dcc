package logwrites

import (
	"encoding/binary"
)

// logWriter writes the format the kernel target writes (drivers/md/
// dm-log-writes.c: log_super, log_one_block), for tests.
type logWriter struct {
	bs      int64
	entries uint64
	body    []byte
}

func newLogWriter(bs int64) *logWriter { return &logWriter{bs: bs} }

func (w *logWriter) header(sector, sectors, flags uint64, mark string) {
	h := make([]byte, w.bs)
	le := binary.LittleEndian
	le.PutUint64(h[0:], sector)
	le.PutUint64(h[8:], sectors)
	le.PutUint64(h[16:], flags)
	le.PutUint64(h[24:], uint64(len(mark)))
	copy(h[32:], mark)
	w.body = append(w.body, h...)
	w.entries++
}

// write logs data (a whole number of blocks) written at sector.
func (w *logWriter) write(sector uint64, data []byte, flags uint64) *logWriter {
	if int64(len(data))%w.bs != 0 {
		panic("logWriter: data is not whole blocks")
	}
	w.header(sector, uint64(int64(len(data))/w.bs), flags, "")
	w.body = append(w.body, data...)
	return w
}

func (w *logWriter) flush() *logWriter { w.header(0, 0, FlagFlush, ""); return w }

func (w *logWriter) discard(sector, sectors uint64) *logWriter {
	w.header(sector, sectors, FlagDiscard, "")
	return w
}

func (w *logWriter) mark(name string) *logWriter { w.header(0, 0, FlagMark, name); return w }

// bytes returns the log: the super block, then the entries.
func (w *logWriter) bytes() []byte {
	s := make([]byte, w.bs)
	le := binary.LittleEndian
	le.PutUint64(s[0:], Magic)
	le.PutUint64(s[8:], Version)
	le.PutUint64(s[16:], w.entries)
	le.PutUint32(s[24:], uint32(w.bs))
	return append(s, w.body...)
}

// fill returns n blocks of size bs, each byte b.
func fill(bs int64, n int, b byte) []byte {
	out := make([]byte, bs*int64(n))
	for i := range out {
		out[i] = b
	}
	return out
}

package gpt

import (
	"bytes"
	"encoding/binary"
	"os"
	"slices"
	"testing"
)

// FuzzRead feeds Read arbitrary disk images (the first byte picks the
// sector size). Whatever it accepts must be a table a writer can keep:
// entries inside the usable range and apart, and a standard table must
// round-trip through Write unchanged.
func FuzzRead(f *testing.F) {
	for _, ss := range []int{512, 4096} {
		img := make([]byte, 64*1024)
		w := &memDisk{b: img}
		first, _, _ := Usable(int64(len(img)), ss)
		es := []Entry{{Index: 1, Type: TypeVolumed, FirstLBA: first, LastLBA: first + 1, Name: "a"}}
		if err := Write(w, int64(len(img)), ss, NewDiskGUID(), es); err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{byte(ss >> 9)}, img...))
	}
	f.Add(append([]byte{1}, hostile(func(h []byte) { binary.LittleEndian.PutUint32(h[84:], 0) })...))
	f.Add(append([]byte{1}, hostile(func([]byte) {})...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		ss := 512
		if data[0]&8 != 0 {
			ss = 4096
		}
		img := data[1:]
		tab, err := Read(bytes.NewReader(img), int64(len(img)), ss)
		if err != nil {
			return
		}
		first, last := tab.Header.FirstUsable, tab.Header.LastUsable
		for i, e := range tab.Entries {
			if e.FirstLBA < first || e.LastLBA > last || e.FirstLBA > e.LastLBA {
				t.Fatalf("entry %+v outside %d-%d", e, first, last)
			}
			for _, o := range tab.Entries[:i] {
				if e.FirstLBA <= o.LastLBA && o.FirstLBA <= e.LastLBA {
					t.Fatalf("entries %+v and %+v overlap", o, e)
				}
			}
		}
		if !tab.Standard() || !tab.PrimaryValid || slices.ContainsFunc(tab.Entries, func(e Entry) bool { return NameUnits(e.Name) > MaxNameUnits }) {
			return
		}
		// A standard table rewritten at the disk's size reads back the same.
		out := &memDisk{b: slices.Clone(img)}
		if err := Write(out, int64(len(img)), ss, tab.Header.DiskGUID, tab.Entries); err != nil {
			// Entries past the usable range of a fresh table (the
			// disk shrank under a table, or it was made larger) are
			// refused, not written.
			return
		}
		again, err := Read(bytes.NewReader(out.b), int64(len(img)), ss)
		if err != nil || !again.Agree {
			t.Fatalf("rewritten table does not read back: %v %+v", err, again)
		}
		if !slices.EqualFunc(again.Entries, tab.Entries, func(a, b Entry) bool {
			return a.Index == b.Index && a.FirstLBA == b.FirstLBA && a.LastLBA == b.LastLBA && a.Type == b.Type && a.GUID == b.GUID && a.Attributes == b.Attributes
		}) {
			t.Fatalf("entries changed: %+v -> %+v", tab.Entries, again.Entries)
		}
	})
}

// memDisk is an in-memory disk for Write.
type memDisk struct {
	b   []byte
	off int64
}

func (m *memDisk) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, os.ErrInvalid
	}
	return copy(p, m.b[off:]), nil
}

func (m *memDisk) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, os.ErrInvalid
	}
	return copy(m.b[off:], p), nil
}

func (m *memDisk) Seek(off int64, whence int) (int64, error) {
	if whence == 2 {
		m.off = int64(len(m.b)) + off
	} else {
		m.off = off
	}
	return m.off, nil
}

func (m *memDisk) Read([]byte) (int, error)   { return 0, os.ErrInvalid }
func (m *memDisk) Close() error               { return nil }
func (m *memDisk) Stat() (os.FileInfo, error) { return nil, os.ErrInvalid }

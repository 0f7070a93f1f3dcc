package gpt

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// FuzzRead feeds Read small disk images. The first byte is flags: bit 3
// picks 4096-byte sectors over 512, bit 0 has the CRCs of both headers
// and their arrays recomputed before the read, so that the fuzzer gets
// past them to the checks behind. Whatever Read accepts must be a table
// a writer can keep: entries inside the usable range and apart. (Inputs
// stay small: the fuzzer minimizes every new input for up to a minute,
// and a 64 KiB standard table takes all of it.)
func FuzzRead(f *testing.F) {
	f.Add(append([]byte{1}, small(nil)...))
	f.Add(append([]byte{1}, small(func(img []byte) {
		entry(img[1024:], 2, 3, 5, "data")
	})...))
	f.Add(append([]byte{1}, small(func(img []byte) {
		entry(img[1024:], 0, 3, 4, "a")
		entry(img[1024+128:], 1, 4, 5, "b") // overlaps a
	})...))
	f.Add(append([]byte{0}, small(func(img []byte) { binary.LittleEndian.PutUint32(img[512+84:], 0) })...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		ss := 512
		if data[0]&8 != 0 {
			ss = 4096
		}
		img := bytes.Clone(data[1:])
		if data[0]&1 != 0 {
			fixCRCs(img, ss)
		}
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
		if uint64(len(img))/uint64(ss) <= last {
			t.Fatalf("usable range %d-%d on a disk of %d bytes", first, last, len(img))
		}
	})
}

// small is a 4 KiB image (8 sectors of 512) with a valid GPT of 4
// entries (one sector of array) at each end, after mutate.
func small(mutate func(img []byte)) []byte {
	img := make([]byte, 8*512)
	le := binary.LittleEndian
	for _, h := range []struct{ my, alt, array uint64 }{{1, 7, 2}, {7, 1, 6}} {
		b := img[h.my*512:]
		copy(b, signature)
		le.PutUint32(b[8:], revision1)
		le.PutUint32(b[12:], 92)
		le.PutUint64(b[24:], h.my)
		le.PutUint64(b[32:], h.alt)
		le.PutUint64(b[40:], 3)
		le.PutUint64(b[48:], 5)
		copy(b[56:72], "0123456789abcdef")
		le.PutUint64(b[72:], h.array)
		le.PutUint32(b[80:], 4)
		le.PutUint32(b[84:], 128)
	}
	img[0x1BE+4], img[0x1BE+8], img[510], img[511] = 0xEE, 1, 0x55, 0xAA
	if mutate != nil {
		mutate(img)
	}
	copy(img[6*512:7*512], img[2*512:3*512])
	fixCRCs(img, 512)
	return img
}

func entry(b []byte, typ byte, first, last uint64, name string) {
	copy(b[:32], bytes.Repeat([]byte{typ + 1}, 32))
	binary.LittleEndian.PutUint64(b[32:], first)
	binary.LittleEndian.PutUint64(b[40:], last)
	for i, c := range name {
		binary.LittleEndian.PutUint16(b[56+2*i:], uint16(c))
	}
}

// fixCRCs recomputes the array and header CRCs of the headers at LBA 1
// and the one it points at, as far as the image holds them.
func fixCRCs(img []byte, ss int) {
	le := binary.LittleEndian
	fix := func(lba uint64) {
		if lba == 0 || lba >= uint64(len(img)/ss) {
			return
		}
		h := img[lba*uint64(ss) : (lba+1)*uint64(ss)]
		n := uint64(le.Uint32(h[80:])) * uint64(le.Uint32(h[84:]))
		if at := le.Uint64(h[72:]); at < uint64(len(img)/ss) && n <= uint64(len(img))-at*uint64(ss) {
			le.PutUint32(h[88:], crc32.ChecksumIEEE(img[at*uint64(ss):at*uint64(ss)+n]))
		}
		if hs := le.Uint32(h[12:]); hs >= 20 && int(hs) <= ss {
			clear(h[16:20])
			le.PutUint32(h[16:], crc32.ChecksumIEEE(h[:hs]))
		}
	}
	if len(img) >= 2*ss {
		fix(1)
		fix(le.Uint64(img[ss+32:]))
	}
}

// The seeds are what they claim: a valid empty table, one partition,
// and overlapping partitions refused.
func TestFuzzSeeds(t *testing.T) {
	read := func(img []byte) (*Table, error) { return Read(bytes.NewReader(img), int64(len(img)), 512) }
	if tab, err := read(small(nil)); err != nil || !tab.Agree || !tab.ProtectiveMBR || len(tab.Entries) != 0 {
		t.Errorf("empty: %+v, %v", tab, err)
	}
	tab, err := read(small(func(img []byte) { entry(img[1024:], 2, 3, 5, "data") }))
	if err != nil || !tab.Agree || len(tab.Entries) != 1 || tab.Entries[0].Name != "data" {
		t.Errorf("one partition: %+v, %v", tab, err)
	}
	if _, err := read(small(func(img []byte) { entry(img[1024:], 0, 3, 4, "a"); entry(img[1024+128:], 1, 4, 5, "b") })); err == nil {
		t.Error("overlapping partitions read")
	}
}

package logwrites

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func parse(t *testing.T, b []byte) *Log {
	t.Helper()
	l, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// image is a disk of size bytes, each a dot: a replayed write shows.
func image(t *testing.T, size int64) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(bytes.Repeat([]byte{'.'}, int(size))); err != nil {
		t.Fatal(err)
	}
	return f
}

func readAll(t *testing.T, f *os.File) []byte {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadListsEntries(t *testing.T) {
	for _, bs := range []int64{512, 4096} {
		w := newLogWriter(bs).
			write(3, fill(bs, 1, 'a'), 0).
			write(0, fill(bs, 3, 'b'), FlagMetadata).
			flush().
			mark("ready").
			discard(1, 2).
			write(2, fill(bs, 1, 'c'), FlagFlush|FlagFUA)
		l := parse(t, w.bytes())
		if l.BlockSize != bs {
			t.Errorf("block size %d, want %d", l.BlockSize, bs)
		}
		var got []string
		for _, e := range l.Entries {
			got = append(got, e.String())
		}
		want := []string{"#0  sector 3+1", "#1 META sector 0+3", "#2 FLUSH sector 0+0", `#3 mark "ready"`, "#4 DISCARD sector 1+2", "#5 FLUSH|FUA sector 2+1"}
		if !slices.Equal(got, want) {
			t.Errorf("bs %d: entries\n%q\nwant\n%q", bs, got, want)
		}
		d, err := l.Data(l.Entries[1])
		if err != nil || !bytes.Equal(d, fill(bs, 3, 'b')) {
			t.Errorf("bs %d: data of the 3-block write: %v, %q...", bs, err, d[:min(8, len(d))])
		}
		if i, err := l.Mark("ready"); err != nil || i != 3 {
			t.Errorf("mark ready at %d (%v), want 3", i, err)
		}
		if _, err := l.Mark("nope"); err == nil {
			t.Error("a mark that is not in the log was found")
		}
	}
}

// TestReplay checks the image after each prefix of a log against a model
// of the disk: writes land, multi-block writes land whole, a discard
// leaves zeros, marks and flushes change nothing.
func TestReplay(t *testing.T) {
	const bs = 512
	w := newLogWriter(bs).
		write(0, fill(bs, 2, 'a'), 0).
		flush().
		write(1, fill(bs, 3, 'b'), 0).
		mark("m").
		discard(2, 1).
		write(7, fill(bs, 1, 'c'), FlagFUA)
	l := parse(t, w.bytes())
	// The disk before and after each entry: 8 blocks of '.'.
	want := []string{
		"........",
		"aa......",
		"aa......",
		"abbb....",
		"abbb....",
		"ab0b....",
		"ab0b...c",
	}
	for n := range len(l.Entries) + 1 {
		img := image(t, 8*bs)
		if err := l.Replay(img, 0, n, nil); err != nil {
			t.Fatalf("replay to %d: %v", n, err)
		}
		if got := blocks(readAll(t, img), bs); got != want[n] {
			t.Errorf("after %d entries: %s, want %s", n, got, want[n])
		}
	}
	// Replay picks up where it left off, and leaves out what it is told.
	img := image(t, 8*bs)
	if err := l.Replay(img, 0, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Replay(img, 2, 6, map[int]bool{2: true}); err != nil {
		t.Fatal(err)
	}
	if got := blocks(readAll(t, img), bs); got != "aa0....c" {
		t.Errorf("replay without entry 2: %s, want aa0....c", got)
	}
}

// blocks renders an image as one character per block: the block's byte if
// all its bytes are that one, '0' for zeros, '?' for a mix.
func blocks(b []byte, bs int) string {
	var s strings.Builder
	for off := 0; off < len(b); off += bs {
		blk := b[off : off+bs]
		c := blk[0]
		if !bytes.Equal(blk, bytes.Repeat([]byte{c}, bs)) {
			c = '?'
		} else if c == 0 {
			c = '0'
		}
		s.WriteByte(c)
	}
	return s.String()
}

func TestReplayRefusesWritesPastTheImage(t *testing.T) {
	l := parse(t, newLogWriter(512).write(8, fill(512, 1, 'x'), 0).bytes())
	err := l.Replay(image(t, 8*512), 0, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "log entry 0") {
		t.Errorf("a write past the image: %v, want an error naming entry 0", err)
	}
	if err := l.Replay(image(t, 8*512), 0, 2, nil); err == nil {
		t.Error("a replay past the log's last entry did not fail")
	}
}

func TestReadRefusesDamage(t *testing.T) {
	good := newLogWriter(512).write(1, fill(512, 2, 'a'), 0).mark("m").bytes()
	le := binary.LittleEndian
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		log  []byte
		want string
	}{
		{"empty", nil, "log super"},
		{"magic", edit(func(b []byte) []byte { b[0] ^= 1; return b }), "magic"},
		{"version", edit(func(b []byte) []byte { le.PutUint64(b[8:], 2); return b }), "version 2"},
		{"sector size", edit(func(b []byte) []byte { le.PutUint32(b[24:], 1000); return b }), "sectorsize 1000"},
		{"too many entries", edit(func(b []byte) []byte { le.PutUint64(b[16:], 1<<40); return b }), "nr_entries"},
		{"one more entry than written", edit(func(b []byte) []byte { le.PutUint64(b[16:], 3); return b }), "log entry 2: header"},
		{"data cut short", good[:512+512+700], "log entry 0: 2 blocks"},
		{"header cut short", good[:len(good)-100], "log entry 1: header"},
		{"unknown flag", edit(func(b []byte) []byte { le.PutUint64(b[512+16:], 1<<9); return b }), "log entry 0: unknown flags"},
		{"data_len on a write", edit(func(b []byte) []byte { le.PutUint64(b[512+24:], 5); return b }), "log entry 0: data_len 5"},
		{"mark longer than its block", edit(func(b []byte) []byte { le.PutUint64(b[512*4+24:], 600); return b }), "log entry 1: mark of 600 bytes"},
		{"mark with sectors", edit(func(b []byte) []byte { le.PutUint64(b[512*4+8:], 1); return b }), "log entry 1: mark"},
		{"sector overflow", edit(func(b []byte) []byte { le.PutUint64(b[512:], 1<<62); return b }), "log entry 0: sector"},
	}
	for _, c := range cases {
		_, err := Read(bytes.NewReader(c.log), int64(len(c.log)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

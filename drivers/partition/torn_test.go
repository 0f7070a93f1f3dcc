package partition

import (
	stdbytes "bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/volumed/volumed/drivers/gpt"
)

// recorder is a disk image that keeps every write made to it, in order.
type recorder struct {
	*os.File
	writes []write
}

type write struct {
	off  int64
	data []byte
}

func (r *recorder) WriteAt(b []byte, off int64) (int, error) {
	r.writes = append(r.writes, write{off, stdbytes.Clone(b)})
	return r.File.WriteAt(b, off)
}

// A power cut may stop the writing of a new table to a blank disk after
// any of its synced writes. Whatever prefix lands, the next Apply must
// find either a blank disk (nothing written) or a table it may finish:
// never a disk it refuses for good. With the protective MBR written
// first, the cut after it left an MBR and no GPT, which the blank rule
// refuses (a power cut in test/os TestPowerCut found it).
func TestEveryCutOfAFirstWriteIsBlankOrOurs(t *testing.T) {
	const size, ss = 256 * mib, 512
	g := Geometry{Size: size, SectorSize: ss}
	wants := []Want{{Label: "alpha", Size: 64 * mib}, {Label: "beta", Grow: true}}
	p, err := Decide(nil, g, wants)
	if err != nil || !p.Write {
		t.Fatalf("Decide on a blank disk: %+v, %v", p, err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "whole"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{File: f}
	if err := gpt.Write(rec, size, ss, gpt.NewDiskGUID(), p.Entries); err != nil {
		t.Fatal(err)
	}
	if len(rec.writes) < 3 {
		t.Fatalf("%d writes, want the MBR, both arrays and both headers", len(rec.writes))
	}
	for k := 0; k <= len(rec.writes); k++ {
		img, err := os.Create(filepath.Join(t.TempDir(), "cut"))
		if err != nil {
			t.Fatal(err)
		}
		if err := img.Truncate(size); err != nil {
			t.Fatal(err)
		}
		for _, w := range rec.writes[:k] {
			if _, err := img.WriteAt(w.data, w.off); err != nil {
				t.Fatal(err)
			}
		}
		cur, err := gpt.Read(img, size, ss)
		switch {
		case errors.Is(err, gpt.ErrNoGPT):
			if k > 0 {
				t.Errorf("cut after write %d of %d: no GPT but bytes written (at offset %d): a disk the blank rule refuses", k, len(rec.writes), rec.writes[0].off)
			}
		case err != nil:
			t.Errorf("cut after write %d of %d: %v", k, len(rec.writes), err)
		default:
			next, err := Decide(cur, g, wants)
			switch {
			case err != nil:
				t.Errorf("cut after write %d of %d: refused: %v", k, len(rec.writes), err)
			case k < len(rec.writes) && !next.Write:
				t.Errorf("cut after write %d of %d: the torn table is left as it is", k, len(rec.writes))
			case k == len(rec.writes) && next.Write:
				t.Errorf("the whole table is written again: %s", next.Repair)
			}
		}
		img.Close()
	}
}

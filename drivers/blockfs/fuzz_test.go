package blockfs

// FuzzProbe and its seeds, made from real images.

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var writeSeeds = flag.Bool("write-seeds", false, "regenerate testdata/fuzz/FuzzProbe from real images")

// sparseImage is an image made of head at 0, tail at the end and zeros
// in between: the shape of a real device without its bulk.
type sparseImage struct {
	head, tail []byte
	size       int64
}

func newSparse(head, tail []byte, gap uint32) *sparseImage {
	return &sparseImage{head: head, tail: tail, size: int64(len(head)) + int64(gap) + int64(len(tail))}
}

func (s *sparseImage) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= s.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), s.size-off))
	clear(p[:n])
	for i := 0; i < n; i++ {
		pos := off + int64(i)
		if pos < int64(len(s.head)) {
			p[i] = s.head[pos]
		} else if t := pos - (s.size - int64(len(s.tail))); t >= 0 {
			p[i] = s.tail[t]
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func FuzzProbe(f *testing.F) {
	f.Add([]byte{}, []byte{}, uint32(0))
	f.Add([]byte("XFSB"), []byte{}, uint32(1<<20))
	f.Add(append(make([]byte, 510), 0x55, 0xAA), []byte("EFI PART"), uint32(1<<20-8))
	f.Fuzz(func(t *testing.T, head, tail []byte, gap uint32) {
		img := newSparse(head, tail, gap)
		sigs, err := Probe(img, img.size)
		if err != nil {
			t.Fatalf("Probe: %v", err)
		}
		again, err := Probe(img, img.size)
		if err != nil || !slices.Equal(sigs, again) {
			t.Fatalf("Probe is not deterministic: %v vs %v (%v)", sigs, again, err)
		}
		for _, s := range sigs {
			if s.Type == "" || s.Usage == "" || s.Source != SourceVolumed || s.Offset < 0 || s.Offset >= img.size {
				t.Fatalf("bad signature %+v for size %d", s, img.size)
			}
		}
		if !slices.ContainsFunc(head, func(b byte) bool { return b != 0 }) &&
			!slices.ContainsFunc(tail, func(b byte) bool { return b != 0 }) && len(sigs) != 0 {
			t.Fatalf("all-zero image gave %+v", sigs)
		}
	})
}

// fuzzSeeds are the shapes in testdata/fuzz/FuzzProbe: the first and
// last 4 KiB of real images, with the zeros around them folded into the
// gap, and the type each must still probe as.
func fuzzSeeds(t *testing.T) map[string]struct {
	make func(img string)
	want string
} {
	type seed = struct {
		make func(img string)
		want string
	}
	return map[string]seed{
		"ext4":  {func(img string) { runCmd(t, "", "mkfs.ext4", "-q", "-F", img) }, "ext4"},
		"ext3":  {func(img string) { runCmd(t, "", "mke2fs", "-q", "-F", "-t", "ext3", img) }, "ext3"},
		"xfs":   {func(img string) { runCmd(t, "", "mkfs.xfs", "-q", img) }, "xfs"},
		"vfat":  {func(img string) { runCmd(t, "", "mkfs.vfat", "-F", "32", img) }, "vfat"},
		"swap":  {func(img string) { runCmd(t, "", "mkswap", img) }, "swap"},
		"gpt":   {func(img string) { writeGPT(t, img, fuzzSeedSize, 512) }, "gpt"},
		"gpt4k": {func(img string) { writeGPT(t, img, fuzzSeedSize, 4096) }, "gpt"},
		"gpt-backup-only": {func(img string) {
			writeGPT(t, img, fuzzSeedSize, 512)
			writeAt(t, img, 0, make([]byte, mib))
		}, "gpt"},
		"md-1.1": {func(img string) {
			writeAt(t, img, 0, binary.LittleEndian.AppendUint32(nil, 0xa92b4efc))
		}, "linux_raid_member"},
		"luks1": {func(img string) { writeAt(t, img, 0, []byte("LUKS\xba\xbe\x00\x01")) }, "crypto_LUKS"},
	}
}

const fuzzSeedSize = 320 * mib

// TestFuzzSeeds checks that every committed seed still has the shape it
// was made from; with -write-seeds it first regenerates them from real
// images.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzProbe")
	if *writeSeeds {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, seed := range fuzzSeeds(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if *writeSeeds {
				img := image(t, name+".img", fuzzSeedSize)
				seed.make(img)
				data, err := os.ReadFile(img)
				if err != nil {
					t.Fatal(err)
				}
				head := bytes.TrimRight(data[:4096], "\x00")
				tail := bytes.TrimLeft(data[len(data)-4096:], "\x00")
				gap := uint32(len(data) - len(head) - len(tail))
				body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\nuint32(%d)\n", head, tail, gap)
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			body, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("seed missing (regenerate with -write-seeds): %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(body)), "\n")
			if len(lines) != 4 || lines[0] != "go test fuzz v1" {
				t.Fatalf("malformed seed file %s", path)
			}
			unquote := func(line, prefix string) string {
				v, ok := strings.CutPrefix(line, prefix+"(")
				if !ok || !strings.HasSuffix(v, ")") {
					t.Fatalf("seed %s: bad line %q", path, line)
				}
				v = strings.TrimSuffix(v, ")")
				if prefix == "uint32" {
					return v
				}
				s, err := strconv.Unquote(v)
				if err != nil {
					t.Fatalf("seed %s: %v", path, err)
				}
				return s
			}
			gap, err := strconv.ParseUint(unquote(lines[3], "uint32"), 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			img := newSparse([]byte(unquote(lines[1], "[]byte")), []byte(unquote(lines[2], "[]byte")), uint32(gap))
			if img.size != fuzzSeedSize {
				t.Errorf("seed %s describes %d bytes, want %d", name, img.size, fuzzSeedSize)
			}
			sigs, err := Probe(img, img.size)
			if err != nil {
				t.Fatal(err)
			}
			if got := types(sigs, SourceVolumed); !slices.Equal(got, []string{seed.want}) {
				t.Fatalf("seed %s probes as %v, want [%s]", name, got, seed.want)
			}
		})
	}
}

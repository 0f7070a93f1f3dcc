package luks

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

const fixtureUUID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

// fixture is the first 32 KiB of a 20 MiB image made by cryptsetup 2.6.1:
// luksFormat --uuid fixtureUUID --label fixture (pbkdf2), then a
// systemd-tpm2 token imported with `cryptsetup token import`.
func fixture(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "luks2-token.hdr"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// device pads a header to a device of size bytes.
func device(b []byte, size int) []byte {
	out := make([]byte, size)
	copy(out, b)
	return out
}

func TestInspectFixture(t *testing.T) {
	in, err := Inspect(bytes.NewReader(device(fixture(t), 20<<20)), 20<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Copies) != 2 || !in.Copies[0].Primary || in.Copies[1].Offset != 0x4000 {
		t.Fatalf("copies = %+v, want the primary at 0 and the second at 16 KiB", in.Copies)
	}
	best, ok := in.Best()
	if !ok {
		t.Fatalf("no whole copy: %+v", in.Copies)
	}
	if best.UUID != fixtureUUID || best.Label != "fixture" || best.Version != 2 || best.HeaderSize != 0x4000 {
		t.Errorf("best = %+v", best)
	}
	if best.Keyslots != 1 || !slices.Equal(best.Tokens, []string{"systemd-tpm2"}) {
		t.Errorf("keyslots %d tokens %v, want 1 and [systemd-tpm2]", best.Keyslots, best.Tokens)
	}
	if len(best.TokenObjects) != 1 || best.TokenObjects[0].ID != 0 || !slices.Equal(best.TokenObjects[0].Keyslots, []int{0}) ||
		!bytes.Contains(best.TokenObjects[0].JSON, []byte(`"tpm2-pcrs":[7]`)) {
		t.Errorf("token objects %+v, want token 0 bound to keyslot 0 with its JSON", best.TokenObjects)
	}
	if in.HalfWrittenBy(fixtureUUID) {
		t.Error("a whole header with a keyslot counts as half-written: a redo would destroy a working volume")
	}
}

// corrupt flips one byte of the JSON area of the copy at off.
func corrupt(b []byte, off int) { b[off+binHeaderSize+10] ^= 0xff }

func TestInspectDamagedCopies(t *testing.T) {
	b := device(fixture(t), 20<<20)
	corrupt(b, 0)
	in, _ := Inspect(bytes.NewReader(b), int64(len(b)))
	best, ok := in.Best()
	if !ok || best.Primary {
		t.Fatalf("with the primary torn, the second copy should win: %+v", in.Copies)
	}
	if in.Copies[0].ChecksumValid || in.Copies[0].Problem == "" {
		t.Errorf("torn primary reported whole: %+v", in.Copies[0])
	}
	if in.HalfWrittenBy(fixtureUUID) {
		t.Error("one whole copy left, yet half-written")
	}

	corrupt(b, 0x4000)
	in, _ = Inspect(bytes.NewReader(b), int64(len(b)))
	if _, ok := in.Best(); ok {
		t.Fatalf("both copies torn, still a whole one: %+v", in.Copies)
	}
	if !in.HalfWrittenBy(fixtureUUID) {
		t.Error("both copies torn with our UUID: a redo of our format must be allowed")
	}
	if in.HalfWrittenBy("11111111-2222-3333-4444-555555555555") {
		t.Error("a torn header of another UUID counts as ours")
	}
	if in.UUID() != fixtureUUID {
		t.Errorf("UUID() = %q", in.UUID())
	}
}

func TestInspectOtherShapes(t *testing.T) {
	size := 1 << 20
	blank := make([]byte, size)
	if in, _ := Inspect(bytes.NewReader(blank), int64(size)); in.Found() || in.HalfWrittenBy(fixtureUUID) {
		t.Errorf("blank device: %+v", in)
	}

	luks1 := make([]byte, size)
	copy(luks1, "LUKS\xba\xbe\x00\x01")
	copy(luks1[offUUID:], fixtureUUID)
	in, _ := Inspect(bytes.NewReader(luks1), int64(size))
	if !in.Found() || in.Copies[0].Version != 1 || in.Copies[0].Whole() {
		t.Errorf("LUKS1: %+v", in.Copies)
	}
	// Our own UUID in a LUKS1 header is never ours to redo: we write LUKS2.
	if _, ok := in.Best(); ok {
		t.Error("LUKS1 header counted as whole LUKS2")
	}

	// A header whose size field is absurd is reported, not followed.
	b := device(fixture(t), size)
	binary.BigEndian.PutUint64(b[offHdrSize:], 1<<40)
	in, _ = Inspect(bytes.NewReader(b), int64(size))
	if in.Copies[0].Problem == "" || in.Copies[0].Whole() {
		t.Errorf("absurd header size accepted: %+v", in.Copies[0])
	}

	// A device too short for the header it starts with.
	short := fixture(t)[:6000]
	in, _ = Inspect(bytes.NewReader(short), int64(len(short)))
	if !in.Found() || in.Copies[0].Whole() {
		t.Errorf("truncated header: %+v", in.Copies)
	}
}

func FuzzInspect(f *testing.F) {
	fx := fixture(f)
	f.Add(fx, uint32(20<<20))
	f.Add(fx[:4096], uint32(4096))
	f.Add([]byte("LUKS\xba\xbe\x00\x02"), uint32(1<<20))
	f.Add([]byte("LUKS\xba\xbe\x00\x01"), uint32(4096))
	torn := slices.Clone(fx)
	corrupt(torn, 0)
	f.Add(torn, uint32(len(torn)))
	f.Fuzz(func(t *testing.T, head []byte, size uint32) {
		dev := int64(max(uint32(len(head)), size%(8<<20)))
		r := sparse{head, dev}
		in, err := Inspect(r, dev)
		if err != nil {
			t.Fatalf("Inspect on memory failed: %v", err)
		}
		again, _ := Inspect(r, dev)
		if len(again.Copies) != len(in.Copies) {
			t.Fatal("Inspect is not deterministic")
		}
		for _, h := range in.Copies {
			if h.Whole() && (h.Version != 2 || h.Problem != "" || h.Offset+int64(h.HeaderSize) > dev) {
				t.Fatalf("whole copy with a problem: %+v", h)
			}
			if !h.Whole() && h.Problem == "" {
				t.Fatalf("copy neither whole nor explained: %+v", h)
			}
		}
		if best, ok := in.Best(); ok && in.HalfWrittenBy(best.UUID) && best.Keyslots > 0 {
			t.Fatalf("a whole header with keyslots counts as half-written: %+v", best)
		}
		if !in.Found() && (in.HalfWrittenBy("x") || in.UUID() != "") {
			t.Fatal("no header, yet a UUID")
		}
	})
}

// sparse is head followed by zeros up to size, without allocating them.
type sparse struct {
	head []byte
	size int64
}

func (s sparse) ReadAt(p []byte, off int64) (int, error) {
	if off >= s.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), s.size-off)
	clear(p[:n])
	if off < int64(len(s.head)) {
		copy(p[:n], s.head[off:])
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

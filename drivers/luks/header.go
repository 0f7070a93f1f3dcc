package luks

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
)

// The LUKS2 on-disk format (cryptsetup's docs/on-disk-format-luks2.pdf):
// a 4096-byte binary header followed by a JSON area, the two together
// hdr_size bytes long, then the same again as a second copy at offset
// hdr_size. The checksum covers the binary header (checksum field zeroed)
// and the JSON area.
const (
	binHeaderSize = 4096
	maxHeaderSize = 4 << 20 // the largest hdr_size cryptsetup writes
	offVersion    = 6
	offHdrSize    = 8
	offSeqID      = 16
	offLabel      = 24
	offCsumAlg    = 72
	offUUID       = 168
	offHdrOffset  = 256
	offCsum       = 448
	lenLabel      = 48
	lenCsumAlg    = 32
	lenUUID       = 40
	lenCsum       = 64
)

var (
	magicPrimary   = []byte("LUKS\xba\xbe")
	magicSecondary = []byte("SKUL\xba\xbe")
)

// secondaryOffsets are where a LUKS2 second header may sit: hdr_size is
// one of these (16 KiB .. 4 MiB, doubling).
var secondaryOffsets = []int64{0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000}

// Header is what one binary header copy says, and whether it is whole.
type Header struct {
	Offset     int64  // where this copy starts on the device
	Primary    bool   // magic "LUKS\xba\xbe" rather than the second copy's "SKUL\xba\xbe"
	Version    int    // 1 or 2
	HeaderSize uint64 // binary header + JSON area (LUKS2)
	SeqID      uint64 // bumped by every metadata write; the higher whole copy wins
	Label      string
	UUID       string
	// ChecksumValid: the stored checksum matches the binary header and
	// JSON area (LUKS2 with a sha256 checksum; false otherwise).
	ChecksumValid bool
	// JSONValid: the JSON area parses as LUKS2 metadata.
	JSONValid bool
	Keyslots  int      // keyslots in the JSON area
	Tokens    []string // token types in the JSON area, e.g. "systemd-tpm2"
	// TokenObjects are the tokens themselves, by ascending ID.
	TokenObjects []Token
	Problem      string // why the copy is not whole, for an error message
}

// Whole reports a LUKS2 copy cryptsetup would accept.
func (h Header) Whole() bool { return h.Version == 2 && h.ChecksumValid && h.JSONValid }

// Inspection is every LUKS header copy found on a device.
type Inspection struct {
	Copies []Header
}

// Found reports any LUKS magic at all: the device is not blank, and
// nothing but an open (or a redo of our own interrupted format) may
// touch it.
func (in Inspection) Found() bool { return len(in.Copies) > 0 }

// Best is the whole copy with the highest sequence number, as cryptsetup
// chooses; ok is false when no copy is whole.
func (in Inspection) Best() (Header, bool) {
	var best Header
	ok := false
	for _, h := range in.Copies {
		if h.Whole() && (!ok || h.SeqID > best.SeqID) {
			best, ok = h, true
		}
	}
	return best, ok
}

// UUID is the volume UUID the copies agree on, preferring a whole copy;
// "" when there is none or they disagree (a foreign or mangled header).
func (in Inspection) UUID() string {
	if h, ok := in.Best(); ok {
		return h.UUID
	}
	u := ""
	for _, h := range in.Copies {
		switch {
		case h.UUID == "":
		case u == "":
			u = h.UUID
		case u != h.UUID:
			return ""
		}
	}
	return u
}

// HalfWrittenBy reports the one state in which a format may be redone:
// every LUKS copy on the device carries uuid (the one chosen before our
// luksFormat and kept in its intent) and the device does not hold a
// usable volume: no whole copy, or a whole one with no keyslot (the
// crash came between luksFormat's header write and its keyslot write).
func (in Inspection) HalfWrittenBy(uuid string) bool {
	if uuid == "" || !in.Found() {
		return false
	}
	for _, h := range in.Copies {
		if h.UUID != uuid {
			return false
		}
	}
	best, ok := in.Best()
	return !ok || best.Keyslots == 0
}

// Inspect reads every LUKS header copy on r (a device of size bytes). It
// reads at most a few MiB and never fails on content: garbage is
// reported as a copy with a Problem. Only read errors are errors.
func Inspect(r io.ReaderAt, size int64) (Inspection, error) {
	var in Inspection
	h, found, err := readCopy(r, size, 0, magicPrimary)
	if err != nil {
		return in, err
	}
	if found {
		in.Copies = append(in.Copies, h)
	}
	for _, off := range secondaryOffsets {
		h, found, err := readCopy(r, size, off, magicSecondary)
		if err != nil {
			return in, err
		}
		if found {
			in.Copies = append(in.Copies, h)
		}
	}
	return in, nil
}

func readCopy(r io.ReaderAt, size, off int64, magic []byte) (Header, bool, error) {
	if off+binHeaderSize > size {
		return Header{}, false, nil
	}
	bin := make([]byte, binHeaderSize)
	if _, err := r.ReadAt(bin, off); err != nil && !errors.Is(err, io.EOF) {
		return Header{}, false, fmt.Errorf("read LUKS header at %d: %w", off, err)
	}
	if !bytes.Equal(bin[:len(magic)], magic) {
		return Header{}, false, nil
	}
	h := Header{
		Offset:     off,
		Primary:    off == 0,
		Version:    int(binary.BigEndian.Uint16(bin[offVersion:])),
		HeaderSize: binary.BigEndian.Uint64(bin[offHdrSize:]),
		SeqID:      binary.BigEndian.Uint64(bin[offSeqID:]),
		Label:      cString(bin[offLabel : offLabel+lenLabel]),
		UUID:       cString(bin[offUUID : offUUID+lenUUID]),
	}
	if h.Version == 1 {
		// LUKS1 has its UUID at the same offset but no checksum or JSON;
		// it is reported, never formatted over or opened as LUKS2.
		h.Problem = "LUKS1 header"
		return h, true, nil
	}
	if h.Version != 2 {
		h.Problem = fmt.Sprintf("unknown LUKS version %d", h.Version)
		return h, true, nil
	}
	if hdrOff := binary.BigEndian.Uint64(bin[offHdrOffset:]); hdrOff != uint64(off) {
		h.Problem = fmt.Sprintf("header says it lives at %d, found at %d", hdrOff, off)
		return h, true, nil
	}
	if h.HeaderSize < binHeaderSize*2 || h.HeaderSize > maxHeaderSize || h.HeaderSize&(h.HeaderSize-1) != 0 {
		h.Problem = fmt.Sprintf("header size %d is not a power of two between 8 KiB and 4 MiB", h.HeaderSize)
		return h, true, nil
	}
	if off+int64(h.HeaderSize) > size {
		h.Problem = fmt.Sprintf("header of %d bytes at %d runs past the device's end", h.HeaderSize, off)
		return h, true, nil
	}
	area := make([]byte, h.HeaderSize)
	copy(area, bin)
	if _, err := r.ReadAt(area[binHeaderSize:], off+binHeaderSize); err != nil && !errors.Is(err, io.EOF) {
		return h, true, fmt.Errorf("read LUKS JSON area at %d: %w", off+binHeaderSize, err)
	}
	if alg := cString(bin[offCsumAlg : offCsumAlg+lenCsumAlg]); alg != "sha256" {
		h.Problem = fmt.Sprintf("checksum algorithm %q is not checked here", alg)
	} else {
		stored := slices.Clone(bin[offCsum : offCsum+sha256.Size])
		clear(area[offCsum : offCsum+lenCsum])
		sum := sha256.Sum256(area)
		h.ChecksumValid = bytes.Equal(stored, sum[:])
		copy(area[offCsum:], stored)
		if !h.ChecksumValid {
			h.Problem = "checksum mismatch (a torn or damaged header)"
		}
	}
	js := area[binHeaderSize:]
	if i := bytes.IndexByte(js, 0); i >= 0 {
		js = js[:i]
	}
	var meta struct {
		Keyslots map[string]json.RawMessage `json:"keyslots"`
		Tokens   map[string]json.RawMessage `json:"tokens"`
		Segments map[string]json.RawMessage `json:"segments"`
		Config   json.RawMessage            `json:"config"`
	}
	if err := json.Unmarshal(js, &meta); err != nil {
		if h.Problem == "" {
			h.Problem = "JSON area does not parse: " + err.Error()
		}
		return h, true, nil
	}
	if meta.Keyslots == nil || meta.Segments == nil || meta.Config == nil {
		if h.Problem == "" {
			h.Problem = "JSON area lacks keyslots, segments or config"
		}
		return h, true, nil
	}
	h.JSONValid = true
	h.Keyslots = len(meta.Keyslots)
	for _, t := range tokens(meta.Tokens) {
		h.Tokens = append(h.Tokens, t.Type)
		h.TokenObjects = append(h.TokenObjects, t)
	}
	return h, true, nil
}

// Token is one token of a LUKS2 header: its type, the keyslots it is
// bound to, and its whole JSON object for the type's own parser.
type Token struct {
	ID       int
	Type     string
	Keyslots []int
	JSON     json.RawMessage
}

// tokens sorts the JSON area's tokens by ID; a token whose ID or
// keyslots are not numbers keeps ID -1 or leaves the number out
// (cryptsetup would not have written it).
func tokens(m map[string]json.RawMessage) []Token {
	var out []Token
	for _, id := range slices.Sorted(maps.Keys(m)) {
		var head struct {
			Type     string   `json:"type"`
			Keyslots []string `json:"keyslots"`
		}
		_ = json.Unmarshal(m[id], &head)
		t := Token{ID: -1, Type: head.Type, JSON: m[id]}
		if n, err := strconv.Atoi(id); err == nil && n >= 0 {
			t.ID = n
		}
		for _, k := range head.Keyslots {
			if n, err := strconv.Atoi(k); err == nil && n >= 0 {
				t.Keyslots = append(t.Keyslots, n)
			}
		}
		out = append(out, t)
	}
	slices.SortStableFunc(out, func(a, b Token) int { return a.ID - b.ID })
	return out
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

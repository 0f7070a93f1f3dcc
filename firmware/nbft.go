package firmware

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// The NVMe-oF Boot Firmware Table, as laid out by the NVM Express Boot
// Specification 1.0 (figures 8-24) and as libnvme's nbft.h declares it.
// Every multi-byte field is little-endian and the structures are packed.
// Offsets in heap object references count from byte 0 of the table.
//
// Where firmware in the field differs, or the specification leaves room,
// this parser takes the reading that cannot go wrong silently:
//   - heap strings end at the first NUL or at the object's end, whether
//     or not the length counts the NUL;
//   - the SSNS transport address is a 16-byte IPv6/IPv4-mapped address
//     (as libnvme reads it), or else IP address text;
//   - descriptor lists are walked with the length the control
//     descriptor declares, which must cover the fields read here;
//   - descriptor indexes are kept as the table gives them; one that
//     refers to nothing is not an error (libnvme only logs it).
const (
	nbftSignature = "NBFT"
	// nbftHeaderLen: the 36-byte ACPI header, heap offset and length,
	// the driver signature heap object, the minor revision and 13
	// reserved bytes.
	nbftHeaderLen = 64

	// Each min* is the length up to and including the last field this
	// parser reads, so a descriptor the table declares shorter than that
	// is refused before anything past its end is touched. The
	// specification's full lengths are longer (control 64, host 32,
	// HFI 32, HFI TCP info 128, SSNS 128, security 64, discovery 32);
	// the rest is reserved.
	minControl   = 48
	minHost      = 24
	minHFI       = 22
	minHFITCP    = 110
	minSSNS      = 66
	minSSNSExt   = 18
	minSecurity  = 42
	minDiscovery = 18

	// maxNBFTSize bounds what ReadNBFT loads: heap objects have 16-bit
	// lengths and there are at most 255 descriptors of each kind, so a
	// genuine table is a few kilobytes.
	maxNBFTSize = 1 << 20
)

// Structure IDs (figure 5).
const (
	nbftIDControl   = 1
	nbftIDHost      = 2
	nbftIDHFI       = 3
	nbftIDSSNS      = 4
	nbftIDSecurity  = 5
	nbftIDDiscovery = 6
	nbftIDHFITCP    = 7
	nbftIDSSNSExt   = 9

	nbftTransportTCP = 3
)

// ErrInvalidTable marks a firmware table that is malformed: truncated,
// with a bad checksum or signature, or with an offset or length that
// points outside the table. Nothing of such a table is trusted.
var ErrInvalidTable = errors.New("invalid firmware table")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidTable}, a...)...)
}

// ReadNBFT reads and parses every NBFT under root + /sys/firmware/acpi/tables
// (the kernel names a lone table NBFT and several NBFT1, NBFT2, ...). No
// tables directory or no NBFT gives nil, nil. A table that fails to
// parse is reported in the error; the others are still returned, so a
// caller can pin what it can and still know the picture is incomplete.
func ReadNBFT(root string) ([]*NBFT, error) {
	dir := filepath.Join(root, "/sys/firmware/acpi/tables")
	entries, err := readDirIfAny(dir)
	if err != nil {
		return nil, fmt.Errorf("read NBFT: %w", err)
	}
	var tables []*NBFT
	var errs []error
	for _, e := range entries { // sorted by name
		if !strings.HasPrefix(e.Name(), nbftSignature) || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := readLimited(path, maxNBFTSize)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t, err := ParseNBFT(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		t.Source = path
		tables = append(tables, t)
	}
	return tables, errors.Join(errs...)
}

// nbftParser holds a table whose length, checksum and heap bounds have
// been checked; its methods hand out only sub-slices that lie inside it.
type nbftParser struct {
	b                []byte
	heapOff, heapEnd uint64
}

// ParseNBFT parses a raw NBFT. It is strict about structure: the header
// length must equal len(b), the checksum must hold, and every descriptor
// and heap object must lie inside the table (heap objects inside the
// heap); any violation rejects the whole table with ErrInvalidTable.
// It is lenient about meaning: a dangling index between descriptors is
// kept as given, and descriptors not marked valid are skipped.
func ParseNBFT(b []byte) (*NBFT, error) {
	if len(b) < nbftHeaderLen {
		return nil, invalid("table is %d bytes, shorter than the %d-byte NBFT header", len(b), nbftHeaderLen)
	}
	if sig := string(b[0:4]); sig != nbftSignature {
		return nil, invalid("signature %q, want %q", sig, nbftSignature)
	}
	if n := le32(b, 4); uint64(n) != uint64(len(b)) {
		return nil, invalid("header length %d but the table has %d bytes", n, len(b))
	}
	var sum byte
	for _, c := range b {
		sum += c
	}
	if sum != 0 {
		return nil, invalid("checksum does not add up (sum %#02x, checksum byte %#02x)", sum, b[9])
	}
	t := &NBFT{
		MajorRevision: int(b[8]),
		MinorRevision: int(b[50]),
		OEMID:         acpiString(b[10:16]),
		OEMTableID:    acpiString(b[16:24]),
	}
	// A later major revision is not compatible by definition; minor
	// revisions are, per the specification.
	if t.MajorRevision != 1 {
		return nil, invalid("major revision %d, only 1 is supported", t.MajorRevision)
	}
	p := &nbftParser{b: b}
	heapOff, heapLen := uint64(le32(b, 36)), uint64(le32(b, 40))
	if heapLen > 0 {
		if heapOff < nbftHeaderLen || heapOff+heapLen > uint64(len(b)) {
			return nil, invalid("heap at offset %d length %d lies outside the table (%d bytes, header %d)", heapOff, heapLen, len(b), nbftHeaderLen)
		}
		p.heapOff, p.heapEnd = heapOff, heapOff+heapLen
	}

	ctl, err := p.region("control descriptor", nbftHeaderLen, minControl)
	if err != nil {
		return nil, err
	}
	if ctl[6]&1 == 0 {
		return t, nil
	}
	t.Valid = true
	if ctl[0] != nbftIDControl {
		return nil, invalid("control descriptor: structure id %d, want %d", ctl[0], nbftIDControl)
	}
	if csl := le16(ctl, 4); csl < minControl {
		return nil, invalid("control descriptor: length %d is shorter than %d", csl, minControl)
	} else if _, err := p.region("control descriptor", nbftHeaderLen, uint64(csl)); err != nil {
		return nil, err
	}

	if err := p.host(ctl, &t.Host); err != nil {
		return nil, err
	}
	if t.HFIs, err = parseList(p, ctl, 16, "HFI", minHFI, p.hfi); err != nil {
		return nil, err
	}
	if t.Subsystems, err = parseList(p, ctl, 24, "SSNS", minSSNS, p.ssns); err != nil {
		return nil, err
	}
	if t.Security, err = parseList(p, ctl, 32, "security", minSecurity, p.security); err != nil {
		return nil, err
	}
	if t.Discovery, err = parseList(p, ctl, 40, "discovery", minDiscovery, p.discovery); err != nil {
		return nil, err
	}
	return t, nil
}

// region returns n bytes at off, which must lie after the header and
// inside the table.
func (p *nbftParser) region(what string, off, n uint64) ([]byte, error) {
	if off < nbftHeaderLen || off+n > uint64(len(p.b)) {
		return nil, invalid("%s at offset %d length %d lies outside the table (%d bytes)", what, off, n, len(p.b))
	}
	return p.b[off : off+n], nil
}

// heapObj resolves the heap object reference (offset u32, length u16)
// at d[at:]. A zero length means none and gives nil.
func (p *nbftParser) heapObj(what string, d []byte, at int) ([]byte, error) {
	off, n := uint64(le32(d, at)), uint64(le16(d, at+4))
	if n == 0 {
		return nil, nil
	}
	if off < p.heapOff || off+n > p.heapEnd {
		return nil, invalid("%s: heap object at offset %d length %d lies outside the heap (offset %d length %d)",
			what, off, n, p.heapOff, p.heapEnd-p.heapOff)
	}
	return p.b[off : off+n], nil
}

// heapString resolves a heap object holding text. The specification's
// strings are NUL-terminated, but whether the length counts the NUL
// differs between firmware; the text ends at the first NUL or at the
// object's end, whichever comes first.
func (p *nbftParser) heapString(what string, d []byte, at int) (string, error) {
	obj, err := p.heapObj(what, d, at)
	if err != nil {
		return "", err
	}
	if i := strings.IndexByte(string(obj), 0); i >= 0 {
		obj = obj[:i]
	}
	if !utf8.Valid(obj) {
		return "", invalid("%s: not UTF-8 text", what)
	}
	return string(obj), nil
}

// parseList walks the descriptor list whose offset (u32), per-descriptor
// length (u16), version (u8) and count (u8) sit at ctl[at:]. Each entry
// is parsed by one; one reports false for a descriptor marked invalid.
func parseList[T any](p *nbftParser, ctl []byte, at int, kind string, minLen int,
	one func(what string, d []byte) (T, bool, error)) ([]T, error) {
	off, size, count := uint64(le32(ctl, at)), uint64(le16(ctl, at+4)), uint64(ctl[at+7])
	if count == 0 {
		return nil, nil
	}
	if size < uint64(minLen) {
		return nil, invalid("%s descriptor length %d is shorter than %d", kind, size, minLen)
	}
	all, err := p.region(kind+" descriptor list", off, size*count)
	if err != nil {
		return nil, err
	}
	var out []T
	for i := range count {
		what := fmt.Sprintf("%s descriptor %d", kind, i)
		v, ok, err := one(what, all[i*size:(i+1)*size])
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, v)
		}
	}
	return out, nil
}

func checkID(what string, d []byte, want byte) error {
	if d[0] != want {
		return invalid("%s: structure id %d, want %d", what, d[0], want)
	}
	return nil
}

// acpiString trims the NUL or space padding of a fixed ACPI text field.
func acpiString(b []byte) string {
	return strings.TrimRight(strings.ToValidUTF8(string(b), "?"), "\x00 ")
}

func le16(b []byte, at int) uint16 { return binary.LittleEndian.Uint16(b[at:]) }
func le32(b []byte, at int) uint32 { return binary.LittleEndian.Uint32(b[at:]) }

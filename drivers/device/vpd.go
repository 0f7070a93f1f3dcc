package device

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
)

// SCSI Vital Product Data pages as the kernel exposes them raw in
// /sys/block/sdX/device/vpd_pg80 and vpd_pg83 (SPC-4 7.8.6, 7.8.15).
// Every page starts with a 4-byte header: peripheral byte, page code,
// and a big-endian page length counting the bytes after the header.

const vpdHeader = 4

// vpdBody checks the header of a page with the given code and returns
// the bytes the page length covers.
func vpdBody(b []byte, code byte) ([]byte, error) {
	if len(b) < vpdHeader {
		return nil, fmt.Errorf("VPD page is %d bytes, shorter than its header", len(b))
	}
	if b[1] != code {
		return nil, fmt.Errorf("VPD page code is %#02x, want %#02x", b[1], code)
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if n > len(b)-vpdHeader {
		return nil, fmt.Errorf("VPD page %#02x claims %d bytes, has %d", code, n, len(b)-vpdHeader)
	}
	return b[vpdHeader : vpdHeader+n], nil
}

// parseVPD80 returns the unit serial number of a page 0x80, trimmed of
// its space and NUL padding.
func parseVPD80(b []byte) (string, error) {
	body, err := vpdBody(b, 0x80)
	if err != nil {
		return "", err
	}
	return trimID(string(body)), nil
}

// Designator types and code sets of page 0x83 descriptors.
const (
	desigT10  = 0x1
	desigEUI  = 0x2
	desigNAA  = 0x3
	desigName = 0x8 // SCSI name string: "naa.…", "eui.…", "iqn.…"

	codeBinary = 0x1
	codeASCII  = 0x2
	codeUTF8   = 0x3

	assocLU = 0x0 // the designator names the logical unit, not a port or target
)

// parseVPD83 returns the logical unit's designators of a page 0x83 in
// the kernel's forms ("naa.<hex>", "eui.<hex>", "t10.<text>", or a SCSI
// name string as written), best first: NAA, then EUI-64 (longer first),
// then SCSI name strings, then T10 vendor IDs. Port and target
// designators, and kinds that do not name a unit, are skipped.
func parseVPD83(b []byte) ([]wwn, error) {
	body, err := vpdBody(b, 0x83)
	if err != nil {
		return nil, err
	}
	type ranked struct {
		rank int
		w    wwn
	}
	var found []ranked
	for off := 0; off < len(body); {
		if len(body)-off < 4 {
			return nil, fmt.Errorf("VPD page 0x83: %d stray bytes at offset %d", len(body)-off, vpdHeader+off)
		}
		d := body[off:]
		n := int(d[3])
		if 4+n > len(d) {
			return nil, fmt.Errorf("VPD page 0x83: designator at offset %d claims %d bytes, has %d", vpdHeader+off, n, len(d)-4)
		}
		code, assoc, typ, v := d[0]&0xf, (d[1]>>4)&0x3, d[1]&0xf, d[4:4+n]
		off += 4 + n
		if assoc != assocLU {
			continue
		}
		text := code == codeASCII || code == codeUTF8
		switch {
		case typ == desigNAA && code == codeBinary && (n == 8 || n == 16):
			found = append(found, ranked{100 + n, wwn{"naa", hex.EncodeToString(v)}})
		case typ == desigEUI && code == codeBinary && (n == 8 || n == 12 || n == 16):
			found = append(found, ranked{50 + n, wwn{"eui", hex.EncodeToString(v)}})
		case typ == desigName && text:
			if w := parseWWN(string(v)); w.id != "" {
				found = append(found, ranked{20, w})
			}
		case typ == desigT10 && text:
			// T10 IDs are vendor and product padded with spaces; keep
			// them (the kernel does) but not the trailing padding.
			if id := lowerASCII(trimID(string(v))); id != "" {
				found = append(found, ranked{10, wwn{"t10", id}})
			}
		}
	}
	slices.SortStableFunc(found, func(a, b ranked) int { return b.rank - a.rank })
	out := make([]wwn, 0, len(found))
	for _, f := range found {
		if !slices.Contains(out, f.w) {
			out = append(out, f.w)
		}
	}
	return out, nil
}

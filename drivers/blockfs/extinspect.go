package blockfs

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
)

// inspectExt is Inspect for the common case without blkid: a device
// whose only signature, by the probe, is an ext2/3/4 filesystem has its
// superblock read here. blkid's fork and exec was the largest cost of
// bringing a volume up (docs/performance.md, round 5), and run twice
// per volume (the identity, the fitted size). ok is false, with no
// error, for anything else (no signature, several, another type, a
// superblock whose checksum fails): blkid then decides as before, so
// its verdicts on the unclear cases are untouched.
func inspectExt(device string) (Info, bool, error) {
	r, f, err := openDirect(device)
	if err != nil {
		return Info{}, false, fmt.Errorf("probe %s: %w", device, err)
	}
	defer f.Close()
	size, err := deviceSize(f)
	if err != nil {
		return Info{}, false, fmt.Errorf("probe %s: %w", device, err)
	}
	sigs, err := Probe(r, size)
	if err != nil {
		return Info{}, false, fmt.Errorf("probe %s: %w", device, err)
	}
	if len(sigs) != 1 || !isExt(sigs[0].Type) {
		return Info{}, false, nil
	}
	// Through the page cache, as blkid reads it: a mounted filesystem's
	// superblock may be newer there than on the device.
	b, err := os.Open(device)
	if err != nil {
		return Info{}, false, fmt.Errorf("read superblock of %s: %w", device, err)
	}
	defer b.Close()
	sb := make([]byte, 1024)
	if _, err := b.ReadAt(sb, 1024); err != nil {
		return Info{}, false, fmt.Errorf("read superblock of %s: %w", device, err)
	}
	return extInfo(sb)
}

func isExt(typ string) bool { return typ == "ext2" || typ == "ext3" || typ == "ext4" }

// extROCompatMetadataCsum: the superblock carries a CRC32C of itself.
const extROCompatMetadataCsum = 0x400

// extInfo reads an ext superblock (its 1024 bytes) as blkid would: no
// magic or a checksum that fails is not ext (ok false), and an all-zero
// UUID is no UUID.
func extInfo(sb []byte) (Info, bool, error) {
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
		return Info{}, false, nil
	}
	if binary.LittleEndian.Uint32(sb[0x64:])&extROCompatMetadataCsum != 0 {
		// The kernel's crc32c_le(~0, ...) without the final inversion,
		// over everything before s_checksum.
		sum := ^crc32.Checksum(sb[:0x3FC], crc32.MakeTable(crc32.Castagnoli))
		if sum != binary.LittleEndian.Uint32(sb[0x3FC:]) {
			return Info{}, false, nil
		}
	}
	u := sb[0x68:0x78]
	info := Info{EverMounted: extMounted(sb), Bytes: extBytes(sb)}
	if string(u) != string(make([]byte, 16)) {
		info.UUID = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	}
	return info, true, nil
}

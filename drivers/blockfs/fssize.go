package blockfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
)

// superblockBytes is the size a filesystem says it spans, read from its
// superblock (0 for a type it does not know): after a device grew and
// its filesystem did not (a power cut between the two), the filesystem's
// own size, not the device's, tells that a grow is owed.
func superblockBytes(device, fstype string) (int64, error) {
	f, err := os.Open(device)
	if err != nil {
		return 0, fmt.Errorf("read superblock of %s: %w", device, err)
	}
	defer f.Close()
	read := func(off int64, n int) ([]byte, error) {
		b := make([]byte, n)
		if _, err := f.ReadAt(b, off); err != nil {
			return nil, fmt.Errorf("read superblock of %s: %w", device, err)
		}
		return b, nil
	}
	switch fstype {
	case "ext2", "ext3", "ext4":
		sb, err := read(1024, 1024)
		if err != nil || binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
			return 0, err
		}
		return extBytes(sb), nil
	case "xfs":
		sb, err := read(0, 16)
		if err != nil || !bytes.Equal(sb[:4], []byte("XFSB")) {
			return 0, err
		}
		return int64(binary.BigEndian.Uint64(sb[8:]) * uint64(binary.BigEndian.Uint32(sb[4:]))), nil
	case "btrfs":
		sb, err := read(64<<10, 0x78)
		if err != nil || !bytes.Equal(sb[0x40:0x48], []byte("_BHRfS_M")) {
			return 0, err
		}
		return int64(binary.LittleEndian.Uint64(sb[0x70:])), nil
	}
	return 0, nil
}

// extBytes is the size an ext2/3/4 superblock says its filesystem spans.
func extBytes(sb []byte) int64 {
	blocks := uint64(binary.LittleEndian.Uint32(sb[0x4:]))
	if binary.LittleEndian.Uint32(sb[0x60:])&0x80 != 0 { // INCOMPAT_64BIT
		blocks |= uint64(binary.LittleEndian.Uint32(sb[0x150:])) << 32
	}
	return int64(blocks << (10 + binary.LittleEndian.Uint32(sb[0x18:])))
}

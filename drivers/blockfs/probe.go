// Package blockfs finds out whether a block device (or image file) holds
// anything a user could lose, formats blank ones and grows mounted
// filesystems. It is shared by every attacher.
//
// The probe is deliberately paranoid: a false positive only makes the agent
// refuse to format, a false negative destroys data. So it looks for magic
// numbers at every offset they can live at, including the ends of the device
// (GPT backup header, md superblocks v0.90 and v1.0), and it never treats a
// read failure as "blank".
package blockfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// Signature is one piece of evidence that a device is in use.
type Signature struct {
	Type   string // "ext2","ext3","ext4","xfs","btrfs","vfat","swap","crypto_LUKS","LVM2_member","linux_raid_member","dos","gpt", ...
	Usage  string // "filesystem","partition_table","crypto","raid","other"
	Offset int64  // byte offset where the magic was found; -1 when the source does not say
	Source string // "volumed" (our Go probe) or "blkid"
}

// Usage values.
const (
	UsageFilesystem     = "filesystem"
	UsagePartitionTable = "partition_table"
	UsageCrypto         = "crypto"
	UsageRaid           = "raid"
	UsageOther          = "other"
)

// Source values.
const (
	SourceVolumed = "volumed"
	SourceBlkid   = "blkid"
)

const (
	kib = 1024
)

// prober reads small windows of the device; a window that lies (partly)
// beyond the device simply does not exist, which is how short or garbage
// input stays harmless.
type prober struct {
	r    io.ReaderAt
	size int64
	sigs []Signature
	// windows caches aligned windows of the device already read: the
	// magics of a dozen formats lie within a few windows, and each read
	// of a cold device is a round trip through its driver (a loop
	// device's worker), which made the probe the slowest step of
	// bringing a volume up.
	windows map[windowKey][]byte
	// planned, in a dry run (no reader), collects the windows the steps
	// would read, each read answered with zeros.
	planned map[windowKey]bool
}

func (p *prober) add(typ, usage string, off int64) {
	p.sigs = append(p.sigs, Signature{Type: typ, Usage: usage, Offset: off, Source: SourceVolumed})
}

// magicAt reports whether magic is found at off.
func (p *prober) magicAt(off int64, magic []byte) (bool, error) {
	b, err := p.read(off, int64(len(magic)))
	if err != nil || b == nil {
		return false, err
	}
	return bytes.Equal(b, magic), nil
}

// Probe looks for every signature a user could lose data to, over r of
// size bytes. It returns every hit (a device may carry several, e.g. a
// GPT primary and backup header, or leftovers of an older filesystem) in a
// stable order. It never reads outside [0, size).
func Probe(r io.ReaderAt, size int64) ([]Signature, error) {
	if size < 0 {
		return nil, fmt.Errorf("probe: negative size %d", size)
	}
	p := &prober{r: r, size: size}
	p.prefetch()
	for _, step := range p.steps() {
		if err := step(); err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
	}
	return p.sigs, nil
}

func (p *prober) steps() []func() error {
	return []func() error{
		p.ext, p.xfs, p.btrfs, p.vfat, p.ntfs, p.iso9660, p.f2fs, p.squashfs,
		p.swap, p.luks, p.lvm2, p.mdraid, p.mbr, p.gpt,
	}
}

// ext2/3/4 feature bits (include/linux/ext2_fs.h in e2fsprogs).
const (
	extCompatHasJournal = 0x0004

	extIncompatFiletype   = 0x0002
	extIncompatRecover    = 0x0004
	extIncompatJournalDev = 0x0008
	extIncompatMetaBG     = 0x0010
	// Everything ext3 understands; any other incompat bit means ext4.
	ext3IncompatSupported = extIncompatFiletype | extIncompatRecover | extIncompatMetaBG

	extROCompatSparseSuper = 0x0001
	extROCompatLargeFile   = 0x0002
	extROCompatBtreeDir    = 0x0004
	ext3ROCompatSupported  = extROCompatSparseSuper | extROCompatLargeFile | extROCompatBtreeDir
)

func (p *prober) ext() error {
	const sbOff = 1024
	sb, err := p.read(sbOff, 1024)
	if err != nil || sb == nil {
		return err
	}
	if binary.LittleEndian.Uint16(sb[56:]) != 0xEF53 {
		return nil
	}
	compat := binary.LittleEndian.Uint32(sb[0x5C:])
	incompat := binary.LittleEndian.Uint32(sb[0x60:])
	roCompat := binary.LittleEndian.Uint32(sb[0x64:])
	switch {
	case incompat&extIncompatJournalDev != 0:
		// An external ext3/4 journal: it holds another filesystem's data.
		p.add("jbd", UsageOther, sbOff+56)
	case incompat&^ext3IncompatSupported != 0 || roCompat&^ext3ROCompatSupported != 0:
		p.add("ext4", UsageFilesystem, sbOff+56)
	case compat&extCompatHasJournal != 0:
		p.add("ext3", UsageFilesystem, sbOff+56)
	default:
		p.add("ext2", UsageFilesystem, sbOff+56)
	}
	return nil
}

func (p *prober) xfs() error {
	ok, err := p.magicAt(0, []byte("XFSB"))
	if ok {
		p.add("xfs", UsageFilesystem, 0)
	}
	return err
}

func (p *prober) btrfs() error {
	const off = 64*kib + 0x40
	ok, err := p.magicAt(off, []byte("_BHRfS_M"))
	if ok {
		p.add("btrfs", UsageFilesystem, off)
	}
	return err
}

// looksLikeFATBPB applies the sanity checks blkid uses for FAT boot
// sectors without a type string (old MS-DOS formatters).
func looksLikeFATBPB(bs []byte) bool {
	bytesPerSector := binary.LittleEndian.Uint16(bs[0x0B:])
	sectorsPerCluster := bs[0x0D]
	reserved := binary.LittleEndian.Uint16(bs[0x0E:])
	fats := bs[0x10]
	media := bs[0x15]
	pow2 := func(v uint32) bool { return v != 0 && v&(v-1) == 0 }
	return bytesPerSector >= 512 && bytesPerSector <= 4096 && pow2(uint32(bytesPerSector)) &&
		pow2(uint32(sectorsPerCluster)) && reserved != 0 &&
		(fats == 1 || fats == 2) && (media == 0xF0 || media >= 0xF8) &&
		(bs[0] == 0xEB || bs[0] == 0xE9)
}

func (p *prober) vfat() error {
	bs, err := p.read(0, 512)
	if err != nil || bs == nil {
		return err
	}
	if bs[510] != 0x55 || bs[511] != 0xAA {
		return nil
	}
	switch {
	case bytes.HasPrefix(bs[0x52:], []byte("FAT32   ")):
		p.add("vfat", UsageFilesystem, 0x52)
	case bytes.HasPrefix(bs[0x36:], []byte("FAT12   ")), bytes.HasPrefix(bs[0x36:], []byte("FAT16   ")):
		p.add("vfat", UsageFilesystem, 0x36)
	case bytes.HasPrefix(bs[0x03:], []byte("MSDOS")) || bytes.HasPrefix(bs[0x03:], []byte("MSWIN")) || bytes.HasPrefix(bs[0x03:], []byte("mkfs.fat")):
		if looksLikeFATBPB(bs) {
			p.add("vfat", UsageFilesystem, 0x03)
		}
	}
	return nil
}

func (p *prober) ntfs() error {
	ok, err := p.magicAt(3, []byte("NTFS    "))
	if ok {
		p.add("ntfs", UsageFilesystem, 3)
	}
	return err
}

func (p *prober) iso9660() error {
	const off = 32*kib + 1
	ok, err := p.magicAt(off, []byte("CD001"))
	if ok {
		p.add("iso9660", UsageFilesystem, off)
	}
	return err
}

func (p *prober) f2fs() error {
	ok, err := p.magicAt(1024, []byte{0x10, 0x20, 0xF5, 0xF2})
	if ok {
		p.add("f2fs", UsageFilesystem, 1024)
	}
	return err
}

func (p *prober) squashfs() error {
	ok, err := p.magicAt(0, []byte("hsqs"))
	if ok {
		p.add("squashfs", UsageFilesystem, 0)
	}
	return err
}

// swap: the signature ends the first page, and the page size is that of
// the machine that ran mkswap, which need not be this one.
func (p *prober) swap() error {
	for _, page := range []int64{4 * kib, 8 * kib, 16 * kib, 64 * kib} {
		b, err := p.read(page-10, 10)
		if err != nil {
			return err
		}
		if b == nil {
			continue
		}
		switch string(b) {
		case "SWAPSPACE2", "SWAP-SPACE":
			p.add("swap", UsageOther, page-10)
			return nil
		}
		// A hibernation image written over swap.
		for _, m := range []string{"S1SUSPEND", "S2SUSPEND", "ULSUSPEND", "LINHIB0001"} {
			if bytes.HasPrefix(b, []byte(m)) {
				p.add("swsuspend", UsageOther, page-10)
				return nil
			}
		}
	}
	return nil
}

func (p *prober) luks() error {
	ok, err := p.magicAt(0, []byte("LUKS\xba\xbe"))
	if err != nil {
		return err
	}
	if ok {
		p.add("crypto_LUKS", UsageCrypto, 0)
		return nil
	}
	// LUKS2 keeps a second header at one of these offsets; with the first
	// one wiped the keyslots are still there and still recoverable.
	for _, off := range []int64{0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000} {
		ok, err := p.magicAt(off, []byte("SKUL\xba\xbe"))
		if err != nil {
			return err
		}
		if ok {
			p.add("crypto_LUKS", UsageCrypto, off)
			return nil
		}
	}
	return nil
}

func (p *prober) lvm2() error {
	for sector := int64(0); sector < 4; sector++ {
		off := sector * 512
		b, err := p.read(off, 32)
		if err != nil {
			return err
		}
		if b == nil {
			return nil
		}
		if string(b[0:8]) == "LABELONE" && string(b[24:32]) == "LVM2 001" {
			p.add("LVM2_member", UsageRaid, off)
			return nil
		}
	}
	return nil
}

func (p *prober) mdraid() error {
	const (
		magic    = 0xa92b4efc
		reserved = 64 * kib
	)
	var offs []int64
	// v0.90: 64 KiB-aligned block, the last whole one before the end.
	if p.size >= 2*reserved {
		offs = append(offs, p.size&^(reserved-1)-reserved)
	}
	// v1.0: 8 KiB from the end, 4 KiB aligned.
	if p.size >= 8*kib {
		offs = append(offs, (p.size-8*kib)&^(4*kib-1))
	}
	offs = append(offs, 0, 4*kib) // v1.1, v1.2
	seen := map[int64]bool{}
	for _, off := range offs {
		if seen[off] {
			continue
		}
		seen[off] = true
		b, err := p.read(off, 4)
		if err != nil {
			return err
		}
		if b == nil {
			continue
		}
		// v0.90 is written in the creating host's byte order.
		if binary.LittleEndian.Uint32(b) == magic || binary.BigEndian.Uint32(b) == magic {
			p.add("linux_raid_member", UsageRaid, off)
			return nil
		}
	}
	return nil
}

func (p *prober) mbr() error {
	s, err := p.read(0, 512)
	if err != nil || s == nil {
		return err
	}
	if s[510] != 0x55 || s[511] != 0xAA {
		return nil
	}
	used, protective := 0, false
	for i := 0; i < 4; i++ {
		e := s[0x1BE+16*i : 0x1BE+16*(i+1)]
		if e[0] != 0x00 && e[0] != 0x80 {
			return nil // boot code (e.g. a FAT boot sector), not a partition table
		}
		typ := e[4]
		start := binary.LittleEndian.Uint32(e[8:])
		count := binary.LittleEndian.Uint32(e[12:])
		if typ == 0 {
			continue
		}
		if count == 0 || start == 0 {
			if typ != 0xEE {
				return nil
			}
		}
		if typ == 0xEE {
			protective = true
		}
		used++
	}
	switch {
	case protective:
		// A protective MBR belongs to a GPT; report it as such so that a
		// disk with both GPT headers gone is still seen as partitioned.
		p.add("gpt", UsagePartitionTable, 0x1BE)
	case used > 0:
		p.add("dos", UsagePartitionTable, 0x1BE)
	}
	return nil
}

func (p *prober) gpt() error {
	magic := []byte("EFI PART")
	for _, sector := range []int64{512, 4096} {
		offs := []int64{sector}
		// The backup header lives in the last LBA; it survives tools that
		// wipe only the start of a disk.
		if last := (p.size/sector - 1) * sector; last > sector {
			offs = append(offs, last)
		}
		for _, off := range offs {
			ok, err := p.magicAt(off, magic)
			if err != nil {
				return err
			}
			if ok {
				p.add("gpt", UsagePartitionTable, off)
			}
		}
	}
	return nil
}

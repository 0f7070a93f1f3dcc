// Package blank holds the one rule that says whether a device (or an
// image file) is blank: the only thing volumed ever formats,
// partitions or encrypts. "No signature" is not blank: plain dm-crypt,
// a damaged label or a raw database device carry none. So a device is
// blank only when nothing knows it (no signature by volumed's probe or
// blkid's, no partition or holder the kernel has) and the bytes where
// data lives read as zeros. The facts are gathered by the drivers
// (drivers/blockfs.Examine); the decision here is pure.
package blank

import (
	"fmt"
	"strings"
)

// Signature is one signature a probe found.
type Signature struct {
	Type   string // ext4, gpt, crypto_LUKS, ...
	Usage  string // filesystem, partition_table, crypto, raid, other
	Offset int64  // byte offset of the magic; -1 when unknown
	Source string // the probe that found it: volumed, blkid
}

// Zeros is what reading the places data lives found.
type Zeros struct {
	// Read: the sample was read (the first and last MiB and a seeded
	// sample of blocks across the device).
	Read bool
	// Bytes read and the number of sampled regions.
	Bytes   int64
	Regions int
	// FirstNonZero is the offset of the first non-zero byte found in
	// read order (the first MiB first), -1 when every byte read was zero.
	FirstNonZero int64
	// Seed chose the sampled blocks.
	Seed uint64
}

// Facts are what the drivers found on one device.
type Facts struct {
	Device     string
	Signatures []Signature
	// Partitions and Holders are what the kernel lists in sysfs: the
	// device's partitions, and what holds it or one of its partitions
	// (dm, md, bcache), as kernel names.
	Partitions []string
	Holders    []string
	Zeros      Zeros
	// Created: a sparse image file volumed created itself, by its own
	// intent record, and has not formatted yet. It is blank by that
	// record: nobody else wrote it.
	Created bool
}

// Reasons a device is not blank; each is a condition reason.
const (
	ReasonSignature   = "Signature"
	ReasonPartitions  = "KernelPartitions"
	ReasonHeld        = "Held"
	ReasonNotRead     = "NotRead"
	ReasonUnknownData = "UnknownData"
)

// Verdict is the rule's answer: Blank, or why not.
type Verdict struct {
	Blank   bool
	Reason  string // "" when blank
	Message string
}

// Decide is the rule. Signatures, kernel partitions and holders come
// first: they name what is there. A created image needs nothing read;
// anything else is blank only when its sampled bytes were read and are
// all zero.
func Decide(f Facts) Verdict {
	switch {
	case len(f.Signatures) > 0:
		return not(ReasonSignature, "%s carries %s", f.Device, describe(f.Signatures))
	case len(f.Partitions) > 0:
		return not(ReasonPartitions, "the kernel lists partitions of %s (%s) that no table on it explains any more: their data is still there",
			f.Device, strings.Join(f.Partitions, ", "))
	case len(f.Holders) > 0:
		return not(ReasonHeld, "%s is held by %s", f.Device, strings.Join(f.Holders, ", "))
	case f.Created:
		return Verdict{Blank: true}
	case !f.Zeros.Read:
		return not(ReasonNotRead, "%s was not read, so it is not known to be blank", f.Device)
	case f.Zeros.FirstNonZero >= 0:
		return not(ReasonUnknownData, "%s carries no signature volumed or blkid knows, but holds data: the first non-zero byte read is at offset %d (of %d bytes sampled in %d regions, seed %d); volumed never formats, partitions or encrypts it; if nothing on it is wanted, run `volumed wipe %s`",
			f.Device, f.Zeros.FirstNonZero, f.Zeros.Bytes, f.Zeros.Regions, f.Zeros.Seed, f.Device)
	}
	return Verdict{Blank: true}
}

func not(reason, format string, args ...any) Verdict {
	return Verdict{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func describe(sigs []Signature) string {
	parts := make([]string, len(sigs))
	for i, s := range sigs {
		parts[i] = fmt.Sprintf("%s (%s at byte %d, found by %s)", s.Type, s.Usage, s.Offset, s.Source)
	}
	return strings.Join(parts, ", ")
}

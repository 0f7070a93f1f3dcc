// Package wipe makes a device that held something blank again, by the
// blank rule (internal/blank), for an operator who wants to reuse it:
// the only way volumed ever destroys bytes, and only when asked with
// --yes. It refuses a device in use (internal/inuse), one the host
// booted from (firmware tables) and one a volume in the state holds.
// It removes what blkid knows (wipefs --all on the partitions and the
// disk), what wipefs leaves (a GPT's backup header, md superblocks at
// the end, ZFS labels at both ends, a Ceph bluestore label at offset
// 0), the kernel's partitions, and then discards the device or zeroes
// what the blank rule reads, and checks the result by that rule.
package wipe

import (
	"errors"
	"fmt"
	"strings"

	"github.com/volumed/volumed/internal/inuse"
)

// Edge is how much of each end of the device is zeroed: it holds every
// label wipefs misses. ZFS keeps two 256 KiB labels at the start and
// two in the last 512 KiB (below a 256 KiB-aligned end), md 0.90 its
// superblock in the last 64-128 KiB and 1.0 its 8 KiB from the end, a
// GPT its backup in the last 33 sectors, Ceph bluestore its label at
// offset 0, LVM its label in sector 1.
const Edge = 1 << 20

// Target is what was found of the device to wipe.
type Target struct {
	Device string
	Size   int64
	// Partitions are the kernel's partitions of it, as /dev nodes.
	Partitions []string
	Use        inuse.Use
	// Pinned says which firmware boot volume the device is ("" if none).
	Pinned string
	// Volumes are the volumes in the state (or the running agent) that
	// hold the device or one of its partitions.
	Volumes []string
	// Discard: the device takes BLKDISCARD (queue/discard_max_bytes > 0).
	Discard bool
	// Signatures is what blkid and volumed's probe find, for the plan.
	Signatures []string
}

// ErrRefused marks a device wipe will not touch.
var ErrRefused = errors.New("refused")

// Refuse is the rule of what is never wiped.
func Refuse(t Target) error {
	if busy, why := inuse.Busy(t.Use); busy {
		return fmt.Errorf("%w: %s", ErrRefused, why)
	}
	switch {
	case t.Use.Gone:
		return fmt.Errorf("%w: %s does not exist", ErrRefused, t.Device)
	case t.Pinned != "":
		return fmt.Errorf("%w: the host booted from %s (%s, pinned by the firmware tables)", ErrRefused, t.Device, t.Pinned)
	case len(t.Volumes) > 0:
		return fmt.Errorf("%w: %s belongs to volume %s in the state; remove its manifest (and let the agent tear it down) first", ErrRefused, t.Device, strings.Join(t.Volumes, ", "))
	case t.Size < 2*Edge:
		return fmt.Errorf("%w: %s has %d bytes, too small to be a volume's", ErrRefused, t.Device, t.Size)
	}
	return nil
}

// StepKind names what a step does.
type StepKind int

// The steps, in the order they run.
const (
	Wipefs         StepKind = iota // wipefs --all on Path
	ZeroEdges                      // zero the first and last Edge bytes
	DropPartitions                 // have the kernel forget the partitions
	Discard                        // BLKDISCARD the whole device
	ZeroSample                     // zero what the blank rule reads, where it is not zero
	Verify                         // the blank rule holds
)

// Step is one thing wipe does.
type Step struct {
	Kind StepKind
	Path string
	Says string
}

// Plan says what wiping t does, in order; partitions first, so their
// own signatures go while their nodes still exist.
func Plan(t Target) []Step {
	var out []Step
	for _, p := range t.Partitions {
		out = append(out, Step{Wipefs, p, "wipefs --all " + p + ": erase every signature blkid knows on the partition"})
	}
	found := "nothing blkid knows"
	if len(t.Signatures) > 0 {
		found = strings.Join(t.Signatures, ", ")
	}
	out = append(out,
		Step{Wipefs, t.Device, fmt.Sprintf("wipefs --all %s: erase every signature blkid knows on the disk (found: %s)", t.Device, found)},
		Step{ZeroEdges, t.Device, fmt.Sprintf("zero the first and last MiB of %s: what wipefs misses (a GPT's backup header, md superblocks at the end, ZFS labels L0-L3, a Ceph bluestore label, an LVM label)", t.Device)},
	)
	if len(t.Partitions) > 0 {
		out = append(out, Step{DropPartitions, t.Device, "have the kernel forget the partitions of " + t.Device + " (" + strings.Join(t.Partitions, ", ") + ")"})
	}
	if t.Discard {
		out = append(out, Step{Discard, t.Device, fmt.Sprintf("discard all %d bytes of %s (BLKDISCARD)", t.Size, t.Device)})
	}
	return append(out,
		Step{ZeroSample, t.Device, "zero the blocks the blank rule reads (a seeded sample across the device) where they do not read as zeros"},
		Step{Verify, t.Device, "check that " + t.Device + " is blank by volumed's blank rule"},
	)
}

// Package partition keeps GPT partitions on a whole disk as volumes ask
// for them: a table is written only on a blank disk (no signature of any
// kind) or on a disk whose table volumed wrote (every partition carries
// gpt.TypeVolumed); a partition is found by its name (its label) and that
// type, never by its number; partitions are created in free space and
// grown into free space after them, never moved, shrunk or deleted. The
// kernel learns of them by BLKPG ioctls, one partition at a time, so the
// disk's other partitions stay mounted.
//
// Decide is the pure decision over the table on disk, the disk's size and
// the partitions wanted; Apply reads the disk, decides, writes the table
// at most once and brings the kernel's view in line. Apply is idempotent:
// after a crash between writing the table and telling the kernel, the
// next Apply finds the partitions on disk, writes nothing and only adds
// what the kernel lacks.
package partition

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/volumed/volumed/drivers/gpt"
)

// ErrRefused: the disk is not volumed's to write (another signature, a
// foreign or damaged table); retrying will not change that.
var ErrRefused = errors.New("refused")

// Align is where partitions start: on 1 MiB boundaries, as every
// partitioning tool does, which suits any physical block or erase size.
const Align = 1 << 20

// Want is one partition a volume asks for.
type Want struct {
	Label string // the GPT partition name, unique on the disk
	Size  int64  // bytes; exactly one of Size and Grow
	Grow  bool   // take the rest of the disk, and what it gains when it grows
}

// Geometry is the disk as the kernel reports it now.
type Geometry struct {
	Size       int64 // bytes
	SectorSize int   // logical block size: 512 or 4096
}

// Kind is what an Action does.
type Kind string

// Kinds of action.
const (
	Create  Kind = "create"
	Enlarge Kind = "grow"
	Nothing Kind = "nothing"
	Refuse  Kind = "refuse"
)

// Action is the decision for one Want.
type Action struct {
	Kind     Kind
	Label    string
	Index    int    // GPT slot, the kernel's partition number; 0 when refused
	FirstLBA uint64 // the partition's extent once the action is done
	LastLBA  uint64
	Reason   string // why (refuse), or a note worth showing (nothing)
}

// Plan is Decide's answer.
type Plan struct {
	Actions []Action // one per Want, in the order given
	// Write: the table must be written, holding Entries under DiskGUID
	// ("" for a new table: the writer makes one up).
	Write    bool
	Entries  []gpt.Entry
	DiskGUID string
	// Repair says why the table is rewritten even if no partition
	// changes (one header damaged, or the two apart after an interrupted
	// write); "" when it is not.
	Repair string
}

// Refused lists the actions that were refused.
func (p Plan) Refused() []Action {
	var out []Action
	for _, a := range p.Actions {
		if a.Kind == Refuse {
			out = append(out, a)
		}
	}
	return out
}

// ValidateWants reports wants that no disk could satisfy: each needs a
// label of at most 36 UTF-16 units without NUL, unique among them, and
// exactly one of a positive size and grow; at most one may grow.
func ValidateWants(wants []Want) error {
	seen := map[string]bool{}
	grows := 0
	for _, w := range wants {
		switch {
		case w.Label == "":
			return errors.New("partition: a label is required")
		case gpt.NameUnits(w.Label) > gpt.MaxNameUnits:
			return fmt.Errorf("partition: label %q is longer than %d UTF-16 units", w.Label, gpt.MaxNameUnits)
		case strings.ContainsRune(w.Label, 0):
			return fmt.Errorf("partition: label %q contains NUL", w.Label)
		case seen[w.Label]:
			return fmt.Errorf("partition: label %q is asked for twice on one disk", w.Label)
		case w.Grow && w.Size != 0, !w.Grow && w.Size <= 0:
			return fmt.Errorf("partition %s: set exactly one of a positive size and grow", w.Label)
		}
		seen[w.Label] = true
		if w.Grow {
			grows++
		}
	}
	if grows > 1 {
		return errors.New("partition: only one partition on a disk can take the rest of it (grow)")
	}
	return nil
}

// Decide plans wants on a disk of geometry g whose table is cur; cur is
// nil for a blank disk (the caller has found no signature on it). An
// error wrapping ErrRefused means the table is not volumed's to write;
// wants that merely do not fit are refused actions, and the others go
// ahead.
func Decide(cur *gpt.Table, g Geometry, wants []Want) (Plan, error) {
	if err := ValidateWants(wants); err != nil {
		return Plan{}, err
	}
	first, last, err := gpt.Usable(g.Size, g.SectorSize)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	ss := uint64(g.SectorSize)
	l := &layout{first: first, last: last, ss: ss, align: uint64(Align) / ss}
	p := Plan{}
	if cur != nil {
		if err := owned(cur, g, last); err != nil {
			return Plan{}, fmt.Errorf("%w: %v", ErrRefused, err)
		}
		l.entries = slices.Clone(cur.Entries)
		p.DiskGUID = cur.Header.DiskGUID
		p.Repair = repairOf(cur)
	}
	p.Actions = make([]Action, len(wants))
	// Partitions that exist first: they may only grow into what follows
	// them, which a new partition must not take before they do.
	for wi, w := range wants {
		if i := l.byLabel(w.Label); i >= 0 {
			p.Actions[wi] = l.resize(i, w)
		}
	}
	// New partitions of a fixed size, first fit, in the order given;
	// then the one that takes the rest, after the last partition.
	for _, grow := range []bool{false, true} {
		for wi, w := range wants {
			if w.Grow == grow && l.byLabel(w.Label) < 0 {
				p.Actions[wi] = l.create(w)
			}
		}
	}
	changed := slices.ContainsFunc(p.Actions, func(a Action) bool { return a.Kind == Create || a.Kind == Enlarge })
	if changed || p.Repair != "" {
		p.Write = true
		slices.SortFunc(l.entries, func(a, b gpt.Entry) int { return a.Index - b.Index })
		p.Entries = l.entries
	}
	return p, nil
}

// repairOf says why a table volumed owns is rewritten although no
// partition changes ("" when both copies are whole and agree).
func repairOf(cur *gpt.Table) string {
	switch {
	case !cur.PrimaryValid:
		return fmt.Sprintf("the primary table is damaged (%v); rewritten from the backup", cur.PrimaryErr)
	case !cur.BackupValid:
		return fmt.Sprintf("the backup table is damaged (%v); rewritten from the primary", cur.BackupErr)
	case !cur.Agree:
		return "the primary and backup tables differ (an interrupted write); rewritten from the primary"
	case !cur.ProtectiveMBR:
		return "the protective MBR is missing (an interrupted write); written"
	}
	return ""
}

// layout is the table being planned: its entries as the plan changes
// them, and the disk's usable sectors.
type layout struct {
	entries            []gpt.Entry
	first, last, align uint64 // usable LBAs; alignment in sectors
	ss                 uint64 // sector size
}

func (l *layout) byLabel(label string) int {
	return slices.IndexFunc(l.entries, func(e gpt.Entry) bool { return e.Name == label })
}

// room is the last LBA free after the partition at i.
func (l *layout) room(i int) uint64 {
	end := l.last
	for _, o := range l.entries {
		if o.FirstLBA > l.entries[i].LastLBA && o.FirstLBA-1 < end {
			end = o.FirstLBA - 1
		}
	}
	return end
}

// resize plans the existing partition at i for w: it may grow into the
// free space after it, and never shrinks.
func (l *layout) resize(i int, w Want) Action {
	ss := l.ss
	e := &l.entries[i]
	a := Action{Kind: Nothing, Label: w.Label, Index: e.Index}
	end := l.room(i)
	switch {
	case w.Grow && end >= e.LastLBA+l.align:
		a.Kind, e.LastLBA = Enlarge, end
	case w.Grow && end < l.last:
		a.Reason = fmt.Sprintf("takes the rest of the disk, but partition %s follows it", nextName(l.entries, i))
	case w.Grow:
	default:
		want := sectors(w.Size, ss)
		have := e.Sectors()
		switch {
		case have > want:
			a.Reason = fmt.Sprintf("is %s, more than the %s asked; partitions never shrink", bytes(have*ss), bytes(want*ss))
		case have == want:
		case e.FirstLBA+want-1 <= end:
			a.Kind, e.LastLBA = Enlarge, e.FirstLBA+want-1
		default:
			a.Kind = Refuse
			a.Reason = fmt.Sprintf("is %s; growing it to %s needs %s more, and only %s is free after it",
				bytes(have*ss), bytes(want*ss), bytes((want-have)*ss), bytes((end-e.LastLBA)*ss))
		}
	}
	a.FirstLBA, a.LastLBA = e.FirstLBA, e.LastLBA
	return a
}

// create places a new partition for w: a fixed size at the first gap it
// fits, or the rest of the disk after the last partition.
func (l *layout) create(w Want) Action {
	a := Action{Kind: Refuse, Label: w.Label}
	gaps := free(l.entries, alignUp(l.first, l.align), l.last, l.align)
	if w.Grow {
		switch {
		case len(gaps) == 0 || gaps[len(gaps)-1][1] != l.last || gaps[len(gaps)-1][1]-gaps[len(gaps)-1][0]+1 < l.align:
			a.Reason = "no free space is left at the end of the disk"
		default:
			a.Kind, a.FirstLBA, a.LastLBA = Create, gaps[len(gaps)-1][0], l.last
		}
	} else {
		n := sectors(w.Size, l.ss)
		a.Reason = fmt.Sprintf("no free space of %s is left on the disk (largest: %s)", bytes(n*l.ss), bytes(largest(gaps)*l.ss))
		for _, gp := range gaps {
			if gp[1]-gp[0]+1 >= n {
				a.Kind, a.Reason, a.FirstLBA, a.LastLBA = Create, "", gp[0], gp[0]+n-1
				break
			}
		}
	}
	if a.Kind != Create {
		return a
	}
	a.Index = freeIndex(l.entries)
	if a.Index == 0 {
		a.Kind, a.Reason = Refuse, "the partition table has no free entry"
		return a
	}
	l.entries = append(l.entries, gpt.Entry{Index: a.Index, Type: gpt.TypeVolumed, FirstLBA: a.FirstLBA, LastLBA: a.LastLBA, Name: w.Label})
	return a
}

// owned says why cur is not a table volumed may extend, or nil if it is.
func owned(cur *gpt.Table, g Geometry, last uint64) error {
	switch {
	case cur.SectorSize != g.SectorSize:
		return fmt.Errorf("the table was read with %d-byte sectors, the disk has %d", cur.SectorSize, g.SectorSize)
	case len(cur.Entries) == 0:
		return errors.New("the disk has a GPT with no partitions, which volumed never writes")
	case !cur.ProtectiveMBR && !cur.EmptyMBR:
		return errors.New("the disk's GPT has no plain protective MBR (a hybrid MBR or boot code is another tool's)")
	case !cur.Standard():
		return fmt.Errorf("the disk's GPT has a layout volumed does not write (%d entries of %d bytes, array at LBA %d)",
			cur.Header.NumEntries, cur.Header.EntrySize, cur.Header.EntriesLBA)
	}
	names := map[string]int{}
	for _, e := range cur.Entries {
		if e.Type != gpt.TypeVolumed {
			return fmt.Errorf("partition %d (%q, type %s) is not volumed's", e.Index, e.Name, e.Type)
		}
		if j, dup := names[e.Name]; dup {
			return fmt.Errorf("partitions %d and %d are both named %q", j, e.Index, e.Name)
		}
		names[e.Name] = e.Index
		if e.LastLBA > last {
			return fmt.Errorf("partition %d (%q) ends at LBA %d, past the last usable LBA %d: the disk is smaller than its table", e.Index, e.Name, e.LastLBA, last)
		}
	}
	return nil
}

// free returns the gaps between entries in [lo, hi], each starting on an
// alignment boundary and at least one alignment unit long, by address.
func free(entries []gpt.Entry, lo, hi, align uint64) [][2]uint64 {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b gpt.Entry) int {
		switch {
		case a.FirstLBA < b.FirstLBA:
			return -1
		case a.FirstLBA > b.FirstLBA:
			return 1
		}
		return 0
	})
	var gaps [][2]uint64
	at := lo
	add := func(end uint64) {
		if start := alignUp(at, align); start <= end && end-start+1 >= align {
			gaps = append(gaps, [2]uint64{start, end})
		}
	}
	for _, e := range sorted {
		if e.FirstLBA > at {
			add(e.FirstLBA - 1)
		}
		at = max(at, e.LastLBA+1)
	}
	if at <= hi {
		add(hi)
	}
	return gaps
}

func largest(gaps [][2]uint64) uint64 {
	var n uint64
	for _, g := range gaps {
		n = max(n, g[1]-g[0]+1)
	}
	return n
}

func freeIndex(entries []gpt.Entry) int {
	for i := 1; i <= 128; i++ {
		if !slices.ContainsFunc(entries, func(e gpt.Entry) bool { return e.Index == i }) {
			return i
		}
	}
	return 0
}

func nextName(entries []gpt.Entry, i int) string {
	next := -1
	for j, o := range entries {
		if o.FirstLBA > entries[i].LastLBA && (next < 0 || o.FirstLBA < entries[next].FirstLBA) {
			next = j
		}
	}
	if next < 0 {
		return "?"
	}
	return fmt.Sprintf("%d (%q)", entries[next].Index, entries[next].Name)
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

func sectors(size int64, ss uint64) uint64 { return (uint64(size) + ss - 1) / ss }

// bytes renders a size the way manifests write them.
func bytes(n uint64) string {
	for _, u := range []struct {
		unit string
		size uint64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.unit)
		}
	}
	if n >= 1<<20 {
		return fmt.Sprintf("%.1fMi", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

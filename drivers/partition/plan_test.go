package partition

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volumed/volumed/drivers/gpt"
)

const (
	mib = 1 << 20
	gib = 1 << 30
	// tableSize is the disk every table is made for; the tests give
	// Decide that size, or another for a disk that grew or shrank.
	tableSize = 1 * gib
)

// table is a volumed table on a disk of tableSize bytes with 512-byte
// sectors, as Read returns it.
func table(entries ...gpt.Entry) *gpt.Table {
	first, last, err := gpt.Usable(tableSize, 512)
	if err != nil {
		panic(err)
	}
	for i := range entries {
		if entries[i].Type == "" {
			entries[i].Type = gpt.TypeVolumed
		}
	}
	return &gpt.Table{
		SectorSize: 512,
		Header: gpt.Header{MyLBA: 1, AlternateLBA: uint64(tableSize/512) - 1, FirstUsable: first, LastUsable: last,
			DiskGUID: "0B6A9D2E-1E8A-4C36-9A33-3A3F2B1C0D11", EntriesLBA: 2, NumEntries: 128, EntrySize: 128},
		Entries: entries, PrimaryValid: true, BackupValid: true, Agree: true, ProtectiveMBR: true,
	}
}

// part is an entry in MiB: [start, start+size).
func part(index int, name string, startMiB, sizeMiB uint64) gpt.Entry {
	return gpt.Entry{Index: index, Name: name, FirstLBA: startMiB * 2048, LastLBA: (startMiB+sizeMiB)*2048 - 1}
}

// toEnd is an entry from startMiB to the end of a disk of size bytes.
func toEnd(index int, name string, startMiB uint64, size int64) gpt.Entry {
	return gpt.Entry{Index: index, Name: name, FirstLBA: startMiB * 2048, LastLBA: lastLBA(size)}
}

func lastLBA(size int64) uint64 {
	_, last, _ := gpt.Usable(size, 512)
	return last
}

type want struct {
	kind         Kind
	index        int
	first, last  uint64
	reasonSubstr string
}

func TestDecide(t *testing.T) {
	const disk = tableSize
	grown := table(part(1, "a", 1, 100), part(2, "b", 101, 200))
	for _, tc := range []struct {
		name   string
		cur    *gpt.Table
		size   int64
		ss     int
		wants  []Want
		want   []want
		write  bool
		repair string
	}{
		{
			name: "blank disk, one partition", size: disk,
			wants: []Want{{Label: "data", Size: 100 * mib}},
			want:  []want{{Create, 1, 2048, 2048 + 100*2048 - 1, ""}}, write: true,
		},
		{
			name: "blank disk, a fixed one and the rest, the rest listed first", size: disk,
			wants: []Want{{Label: "rest", Grow: true}, {Label: "fixed", Size: 10 * mib}},
			want: []want{
				{Create, 2, 11 * 2048, lastLBA(disk), ""},
				{Create, 1, 2048, 11*2048 - 1, ""},
			}, write: true,
		},
		{
			name: "blank disk, a size not a sector multiple rounds up", size: disk,
			wants: []Want{{Label: "odd", Size: 1000}},
			want:  []want{{Create, 1, 2048, 2049, ""}}, write: true,
		},
		{
			name: "blank 4K-sector disk: aligned at 1 MiB = LBA 256", size: disk, ss: 4096,
			wants: []Want{{Label: "data", Size: 8 * mib}},
			want:  []want{{Create, 1, 256, 256 + 2048 - 1, ""}}, write: true,
		},
		{
			name: "blank disk too small for the partition", size: 64 * mib,
			wants: []Want{{Label: "big", Size: 100 * mib}},
			want:  []want{{Refuse, 0, 0, 0, "no free space of 100Mi"}},
		},
		{
			name: "every partition there: nothing to do", size: disk, cur: table(part(1, "a", 1, 100), part(2, "b", 101, 50)),
			wants: []Want{{Label: "b", Size: 50 * mib}, {Label: "a", Size: 100 * mib}},
			want:  []want{{Nothing, 2, 101 * 2048, 151*2048 - 1, ""}, {Nothing, 1, 2048, 101*2048 - 1, ""}},
		},
		{
			name: "a new one after the others", size: disk, cur: table(part(1, "a", 1, 100)),
			wants: []Want{{Label: "a", Size: 100 * mib}, {Label: "b", Size: 10 * mib}},
			want:  []want{{Nothing, 1, 2048, 101*2048 - 1, ""}, {Create, 2, 101 * 2048, 111*2048 - 1, ""}}, write: true,
		},
		{
			name: "first fit: a hole between partitions, and the lowest free slot", size: disk,
			cur:   table(part(1, "a", 1, 10), part(3, "c", 31, 10)),
			wants: []Want{{Label: "b", Size: 20 * mib}},
			want:  []want{{Create, 2, 11 * 2048, 31*2048 - 1, ""}}, write: true,
		},
		{
			name: "the hole is too small: after the last one", size: disk,
			cur:   table(part(1, "a", 1, 10), part(3, "c", 31, 10)),
			wants: []Want{{Label: "b", Size: 21 * mib}},
			want:  []want{{Create, 2, 41 * 2048, 62*2048 - 1, ""}}, write: true,
		},
		{
			name: "the disk grew: the last partition, grow: true, takes it", size: 2 * gib, cur: grown,
			wants: []Want{{Label: "a", Size: 100 * mib}, {Label: "b", Grow: true}},
			want:  []want{{Nothing, 1, 2048, 101*2048 - 1, ""}, {Enlarge, 2, 101 * 2048, lastLBA(2 * gib), ""}}, write: true,
		},
		{
			name: "the disk grew by less than 1 MiB: nothing", size: disk + 512*1024,
			cur:   table(toEnd(1, "b", 1, disk)),
			wants: []Want{{Label: "b", Grow: true}},
			want:  []want{{Nothing, 1, 2048, lastLBA(disk), ""}},
		},
		{
			name: "grow: true on a partition another follows: nothing, and why", size: 2 * gib, cur: grown,
			wants: []Want{{Label: "a", Grow: true}},
			want:  []want{{Nothing, 1, 2048, 101*2048 - 1, `partition 2 ("b") follows it`}},
		},
		{
			name: "a size raised with room after it", size: disk, cur: table(part(1, "a", 1, 10), part(2, "b", 51, 10)),
			wants: []Want{{Label: "a", Size: 50 * mib}},
			want:  []want{{Enlarge, 1, 2048, 51*2048 - 1, ""}}, write: true,
		},
		{
			name: "a size raised past the next partition", size: disk, cur: table(part(1, "a", 1, 10), part(2, "b", 51, 10)),
			wants: []Want{{Label: "a", Size: 51 * mib}},
			want:  []want{{Refuse, 1, 2048, 11*2048 - 1, "only 40Mi is free after it"}},
		},
		{
			name: "a size lowered: never shrunk", size: disk, cur: table(part(1, "a", 1, 10)),
			wants: []Want{{Label: "a", Size: 5 * mib}},
			want:  []want{{Nothing, 1, 2048, 11*2048 - 1, "partitions never shrink"}},
		},
		{
			name: "the disk is full: the newcomer is refused, the other goes ahead", size: disk,
			cur:   table(toEnd(1, "rest", 1, disk)),
			wants: []Want{{Label: "new", Size: 10 * mib}, {Label: "other", Grow: true}},
			want:  []want{{Refuse, 0, 0, 0, "no free space of 10Mi"}, {Refuse, 0, 0, 0, "no free space is left at the end"}},
		},
		{
			name: "an interrupted write (headers apart) is completed", size: disk,
			cur: func() *gpt.Table {
				t := table(part(1, "a", 1, 10))
				t.Agree = false
				return t
			}(),
			wants: []Want{{Label: "a", Size: 10 * mib}},
			want:  []want{{Nothing, 1, 2048, 11*2048 - 1, ""}}, write: true, repair: "differ",
		},
		{
			name: "a damaged primary is rewritten from the backup", size: disk,
			cur: func() *gpt.Table {
				t := table(part(1, "a", 1, 10))
				t.PrimaryValid, t.PrimaryErr, t.Header.MyLBA, t.Header.EntriesLBA = false, errors.New("header CRC mismatch"), uint64(disk/512-1), uint64(disk/512-33)
				return t
			}(),
			wants: []Want{{Label: "a", Size: 10 * mib}},
			want:  []want{{Nothing, 1, 2048, 11*2048 - 1, ""}}, write: true, repair: "primary table is damaged",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := tc.ss
			if ss == 0 {
				ss = 512
			}
			if tc.cur != nil {
				tc.cur.SectorSize = ss
			}
			p, err := Decide(tc.cur, Geometry{Size: tc.size, SectorSize: ss}, tc.wants)
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if len(p.Actions) != len(tc.want) {
				t.Fatalf("actions %+v", p.Actions)
			}
			for i, w := range tc.want {
				a := p.Actions[i]
				if a.Label != tc.wants[i].Label || a.Kind != w.kind || a.Index != w.index || a.Kind != Refuse && (a.FirstLBA != w.first || a.LastLBA != w.last) ||
					!strings.Contains(a.Reason, w.reasonSubstr) || (w.reasonSubstr == "" && a.Reason != "") {
					t.Errorf("action %d = %+v; want %+v", i, a, w)
				}
			}
			if p.Write != tc.write || !strings.Contains(p.Repair, tc.repair) || (tc.repair == "" && p.Repair != "") {
				t.Errorf("Write %v Repair %q; want %v %q", p.Write, p.Repair, tc.write, tc.repair)
			}
			if !p.Write {
				if p.Entries != nil {
					t.Errorf("entries %+v with nothing to write", p.Entries)
				}
				return
			}
			// What would be written is a table the writer accepts and
			// that keeps every partition that was there as it was
			// (never moved or shrunk).
			w, err := os.Create(filepath.Join(t.TempDir(), "disk"))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Truncate(tc.size); err != nil {
				t.Fatal(err)
			}
			if err := gpt.Write(w, tc.size, ss, gpt.NewDiskGUID(), p.Entries); err != nil {
				t.Fatalf("the planned table does not write: %v", err)
			}
			if tc.cur != nil {
				checkKept(t, tc.cur, p)
			}
		})
	}
}

// checkKept fails t unless plan p keeps cur's disk GUID and every
// partition of cur where it was, never shrunk.
func checkKept(t *testing.T, cur *gpt.Table, p Plan) {
	t.Helper()
	if p.DiskGUID != cur.Header.DiskGUID {
		t.Errorf("disk GUID %q, was %q", p.DiskGUID, cur.Header.DiskGUID)
	}
	for _, old := range cur.Entries {
		found := false
		for _, e := range p.Entries {
			if e.Index == old.Index {
				found = true
				if e.FirstLBA != old.FirstLBA || e.LastLBA < old.LastLBA || e.Name != old.Name || e.GUID != old.GUID {
					t.Errorf("partition %+v became %+v", old, e)
				}
			}
		}
		if !found {
			t.Errorf("partition %+v dropped", old)
		}
	}
}

func TestDecideRefusesTables(t *testing.T) {
	const disk = tableSize
	ok := []Want{{Label: "a", Size: 10 * mib}}
	for _, tc := range []struct {
		name   string
		cur    func() *gpt.Table
		size   int64
		reason string
	}{
		{"a foreign partition", func() *gpt.Table {
			t := table(part(1, "a", 1, 10), part(2, "EFI", 11, 10))
			t.Entries[1].Type = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
			return t
		}, disk, `partition 2 ("EFI", type C12A7328`},
		{"no partitions", func() *gpt.Table { return table() }, disk, "no partitions"},
		{"no protective MBR", func() *gpt.Table {
			t := table(part(1, "a", 1, 10))
			t.ProtectiveMBR = false
			return t
		}, disk, "protective MBR"},
		{"another layout", func() *gpt.Table {
			t := table(part(1, "a", 1, 10))
			t.Header.NumEntries = 256
			return t
		}, disk, "256 entries"},
		{"two partitions of one name", func() *gpt.Table { return table(part(1, "a", 1, 10), part(2, "a", 11, 10)) }, disk, `both named "a"`},
		{"the disk shrank", func() *gpt.Table { return table(part(1, "a", 1, 1000)) }, 512 * mib, "smaller than its table"},
		{"a disk too small for any table", nil, 16 * 1024, "too small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cur *gpt.Table
			if tc.cur != nil {
				cur = tc.cur()
			}
			p, err := Decide(cur, Geometry{Size: tc.size, SectorSize: 512}, ok)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Decide = %+v, %v; want refused: %s", p, err, tc.reason)
			}
		})
	}
}

func TestValidateWants(t *testing.T) {
	for _, tc := range []struct {
		wants  []Want
		reason string
	}{
		{[]Want{{Size: mib}}, "label is required"},
		{[]Want{{Label: strings.Repeat("x", 37), Size: mib}}, "longer than 36"},
		{[]Want{{Label: strings.Repeat("𝄞", 19), Size: mib}}, "longer than 36"},
		{[]Want{{Label: "a\x00b", Size: mib}}, "NUL"},
		{[]Want{{Label: "a", Size: mib}, {Label: "a", Size: mib}}, "twice"},
		{[]Want{{Label: "a", Size: mib, Grow: true}}, "exactly one"},
		{[]Want{{Label: "a"}}, "exactly one"},
		{[]Want{{Label: "a", Size: -1}}, "exactly one"},
		{[]Want{{Label: "a", Grow: true}, {Label: "b", Grow: true}}, "only one"},
	} {
		err := ValidateWants(tc.wants)
		if err == nil || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("ValidateWants(%+v) = %v; want %q", tc.wants, err, tc.reason)
		}
		if _, err := Decide(nil, Geometry{Size: gib, SectorSize: 512}, tc.wants); err == nil || errors.Is(err, ErrRefused) {
			t.Errorf("Decide(%+v) = %v; want a validation error", tc.wants, err)
		}
	}
	if err := ValidateWants([]Want{{Label: "data-1", Size: mib}, {Label: "rest", Grow: true}}); err != nil {
		t.Errorf("ValidateWants(good) = %v", err)
	}
}

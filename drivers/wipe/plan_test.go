package wipe

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/internal/inuse"
)

func TestRefuse(t *testing.T) {
	ok := Target{Device: "/dev/sdb", Size: 1 << 30, Use: inuse.Use{Device: "/dev/sdb"}}
	with := func(f func(*Target)) Target { c := ok; f(&c); return c }
	tests := []struct {
		name string
		t    Target
		says string // "" when allowed
	}{
		{"free disk", ok, ""},
		{"held by an LVM volume through a partition", with(func(t *Target) { t.Use.Holders = []string{"dm-0 (of sdb1)"} }), "held by dm-0 (of sdb1)"},
		{"held by md", with(func(t *Target) { t.Use.Holders = []string{"md127"} }), "held by md127"},
		{"mounted", with(func(t *Target) { t.Use.Claimed, t.Use.Mounts = true, []string{"/srv"} }), "mounted at /srv"},
		{"open exclusively elsewhere", with(func(t *Target) { t.Use.Claimed = true }), "open exclusively"},
		{"boot device", with(func(t *Target) { t.Pinned = "iSCSI target iqn.x:boot" }), "booted from"},
		{"a volume's", with(func(t *Target) { t.Volumes = []string{"data"} }), "volume data"},
		{"gone", with(func(t *Target) { t.Use.Gone = true }), "does not exist"},
		{"tiny", with(func(t *Target) { t.Size = 4096 }), "too small"},
	}
	for _, tt := range tests {
		err := Refuse(tt.t)
		switch {
		case tt.says == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.says != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.says)):
			t.Errorf("%s: %v, want a refusal saying %q", tt.name, err, tt.says)
		}
	}
}

func TestPlan(t *testing.T) {
	kinds := func(steps []Step) (out []StepKind) {
		for _, s := range steps {
			out = append(out, s.Kind)
		}
		return out
	}
	bare := Plan(Target{Device: "/dev/sdb", Size: 1 << 30})
	if got, want := kinds(bare), []StepKind{Wipefs, ZeroEdges, ZeroSample, Verify}; !slices.Equal(got, want) {
		t.Errorf("a disk with no partitions and no discard: %v, want %v", got, want)
	}
	full := Plan(Target{Device: "/dev/sdb", Size: 1 << 30, Partitions: []string{"/dev/sdb1", "/dev/sdb2"}, Discard: true, Signatures: []string{"gpt at byte 512"}})
	if got, want := kinds(full), []StepKind{Wipefs, Wipefs, Wipefs, ZeroEdges, DropPartitions, Discard, ZeroSample, Verify}; !slices.Equal(got, want) {
		t.Errorf("a partitioned disk that discards: %v, want %v", got, want)
	}
	if full[0].Path != "/dev/sdb1" || full[2].Path != "/dev/sdb" || !strings.Contains(full[2].Says, "gpt at byte 512") {
		t.Errorf("partitions are wiped before the disk, which says what was found: %+v", full[:3])
	}
}

// The plan names each signature once, where it is when that is known:
// the LVM label volumed's probe finds at byte 512 is the one blkid
// reports with no offset ("LVM2_member at byte -1" was printed).
func TestDescribeSignatures(t *testing.T) {
	got := describe([]blockfs.Signature{
		{Type: "LVM2_member", Offset: 512, Source: blockfs.SourceVolumed},
		{Type: "LVM2_member", Offset: -1, Source: blockfs.SourceBlkid},
		{Type: "zfs_member", Offset: -1, Source: blockfs.SourceBlkid},
		{Type: "gpt", Offset: 512}, {Type: "gpt", Offset: 512},
	})
	want := []string{"LVM2_member at byte 512", "zfs_member (where, blkid does not say)", "gpt at byte 512"}
	if !slices.Equal(got, want) {
		t.Errorf("describe = %q, want %q", got, want)
	}
}

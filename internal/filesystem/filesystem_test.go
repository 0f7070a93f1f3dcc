package filesystem

import (
	"slices"
	"strings"
	"testing"
)

func TestLookupOfCompatible(t *testing.T) {
	if ty, ok := Lookup("xfs"); !ok || ty.Mkfs.Program != "mkfs.xfs" {
		t.Errorf("Lookup(xfs) = %+v, %v", ty, ok)
	}
	for _, name := range []string{"ext3", "vfat", ""} {
		if _, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) found a type volumed does not format", name)
		}
	}
	tests := []struct {
		found, want string
		ok          bool
	}{
		{"ext4", "ext4", true},
		{"ext3", "ext4", true},
		{"ext2", "ext4", true},
		{"xfs", "xfs", true},
		{"btrfs", "btrfs", true},
		{"ext4", "xfs", false},
		{"xfs", "ext4", false},
		{"ext3", "ext3", false}, // ext3 is not a type a manifest names
		{"vfat", "vfat", false},
		{"", "ext4", false},
	}
	for _, tt := range tests {
		if got := Compatible(tt.found, tt.want); got != tt.ok {
			t.Errorf("Compatible(%q, %q) = %v, want %v", tt.found, tt.want, got, tt.ok)
		}
	}
	if ty, ok := Of("ext2"); !ok || ty.Name != "ext4" {
		t.Errorf("Of(ext2) = %q, %v; want ext4", ty.Name, ok)
	}
	if _, ok := Lookup(Default); !ok {
		t.Errorf("the default type %q is not registered", Default)
	}
}

func TestNamesAndList(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"ext4", "xfs", "btrfs"}) {
		t.Errorf("Names = %q", got)
	}
	if got := List(); got != "ext4, xfs or btrfs" {
		t.Errorf("List = %q", got)
	}
}

func TestMkfsCommand(t *testing.T) {
	const uuid = "0b6b1c4e-3f51-4c1e-9a51-2a1d1c0e7a11"
	tests := []struct {
		fs    string
		uuid  string
		force bool
		extra []string
		want  string
	}{
		{"ext4", "", false, nil, "-q -F /dev/x"},
		{"ext4", uuid, true, []string{"-E", "nodiscard"}, "-q -F -U " + uuid + " -E nodiscard /dev/x"},
		{"xfs", uuid, false, nil, "-q -m uuid=" + uuid + " /dev/x"},
		{"xfs", "", true, nil, "-q -f /dev/x"},
		{"btrfs", uuid, true, []string{"-K"}, "-q -U " + uuid + " -f -K /dev/x"},
	}
	for _, tt := range tests {
		ty, _ := Lookup(tt.fs)
		if got := strings.Join(ty.Mkfs.Command("/dev/x", tt.uuid, tt.force, tt.extra), " "); got != tt.want {
			t.Errorf("%s mkfs (uuid %q, force %v, %q) = %q, want %q", tt.fs, tt.uuid, tt.force, tt.extra, got, tt.want)
		}
	}
	// The registry's own slices are not changed by a command.
	ty, _ := Lookup("ext4")
	_ = ty.Mkfs.Command("/dev/x", uuid, true, []string{"-v"})
	if again, _ := Lookup("ext4"); !slices.Equal(again.Mkfs.Args, []string{"-q", "-F"}) {
		t.Errorf("mkfs.ext4's fixed arguments became %q", again.Mkfs.Args)
	}
}

func TestGrowAndCheckCommands(t *testing.T) {
	tests := []struct{ fs, grow, check string }{
		{"ext4", "resize2fs /dev/x", "e2fsck -n -f /dev/x"},
		{"xfs", "xfs_growfs /mnt", "xfs_repair -n /dev/x"},
		{"btrfs", "btrfs filesystem resize max /mnt", "btrfs check --readonly /dev/x"},
	}
	for _, tt := range tests {
		ty, _ := Lookup(tt.fs)
		if got := ty.Grow.Program + " " + strings.Join(ty.Grow.Command("/dev/x", "/mnt"), " "); got != tt.grow {
			t.Errorf("%s grow = %q, want %q", tt.fs, got, tt.grow)
		}
		if got := ty.Check.Program + " " + strings.Join(ty.Check.Command("/dev/x"), " "); got != tt.check {
			t.Errorf("%s check = %q, want %q", tt.fs, got, tt.check)
		}
	}
}

func TestCheckDamaged(t *testing.T) {
	tests := []struct {
		fs      string
		code    int
		damaged bool
	}{
		{"ext4", 4, true},   // errors left uncorrected
		{"ext4", 1, false},  // errors corrected (not with -n)
		{"ext4", 12, false}, // 8: an operational error
		{"xfs", 1, true},
		{"xfs", 2, false}, // a dirty log
		{"btrfs", 1, true},
		{"btrfs", 0, false},
	}
	for _, tt := range tests {
		ty, _ := Lookup(tt.fs)
		if got := ty.Check.Damaged(tt.code); got != tt.damaged {
			t.Errorf("%s checker exit %d damaged = %v, want %v", tt.fs, tt.code, got, tt.damaged)
		}
	}
}

func TestPrograms(t *testing.T) {
	tests := []struct{ fs, want string }{
		{"ext4", "mkfs.ext4: formats ext4 volumes; resize2fs: grows ext4 filesystems; e2fsck: checks ext4 filesystems"},
		{"xfs", "mkfs.xfs: formats xfs volumes; xfs_growfs: grows xfs filesystems; xfs_repair: checks xfs filesystems"},
		{"btrfs", "mkfs.btrfs: formats btrfs volumes; btrfs: grows and checks btrfs filesystems"},
	}
	for _, tt := range tests {
		ty, _ := Lookup(tt.fs)
		var got []string
		for _, p := range ty.Programs() {
			got = append(got, p.Name+": "+p.Why)
		}
		if strings.Join(got, "; ") != tt.want {
			t.Errorf("%s programs = %q, want %q", tt.fs, strings.Join(got, "; "), tt.want)
		}
	}
}

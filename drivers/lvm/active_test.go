package lvm

import (
	"os"
	"path/filepath"
	"testing"
)

// An LV is active when a dm device carries lvm2's DM UUID; a dm device of
// another maker (a LUKS mapping, a multipath map) is not one.
func TestAnyActive(t *testing.T) {
	sys := t.TempDir()
	dm := func(n, uuid string) {
		dir := filepath.Join(sys, "block", n, "dm")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "uuid"), []byte(uuid+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := AnyActive(sys); got || err != nil {
		t.Errorf("AnyActive with no dm device = %v, %v", got, err)
	}
	dm("dm-0", "CRYPT-LUKS2-0123456789abcdef0123456789abcdef-data")
	if got, err := AnyActive(sys); got || err != nil {
		t.Errorf("AnyActive with a LUKS mapping only = %v, %v", got, err)
	}
	dm("dm-1", "LVM-Qm4TcX1vKz8dJ0a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8s9t0u1v2w3x4y5")
	if got, err := AnyActive(sys); !got || err != nil {
		t.Errorf("AnyActive with an LV = %v, %v", got, err)
	}
}

// GroupOf reads the VG back out of lvm2's device name, whose dashes it
// doubled; a dm device lvm2 did not make has none.
func TestGroupOf(t *testing.T) {
	sys := t.TempDir()
	for _, c := range []struct{ name, uuid, want string }{
		{"vg0-data", "LVM-abc", "vg0"},
		{"my--vg-my--lv", "LVM-abc", "my-vg"},
		{"vg0-pool0_tdata", "LVM-abc-tdata", "vg0"},
		{"a---b", "LVM-abc", "a-"}, // VG "a-", LV "b"
		{"volumed-secret", "CRYPT-LUKS2-0123-volumed-secret", ""},
		{"noseparator", "LVM-abc", ""},
	} {
		dir := filepath.Join(sys, c.name)
		if err := os.MkdirAll(filepath.Join(dir, "dm"), 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"name": c.name, "uuid": c.uuid} {
			if err := os.WriteFile(filepath.Join(dir, "dm", f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := GroupOf(dir); got != c.want {
			t.Errorf("GroupOf(%s, %s) = %q, want %q", c.name, c.uuid, got, c.want)
		}
	}
	if got := GroupOf(filepath.Join(sys, "sdb")); got != "" {
		t.Errorf("GroupOf a disk = %q", got)
	}
}

package lvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLeftovers(t *testing.T) {
	lvs := []LV{
		{VG: "vg0", Name: "old", UUID: "u-old", Tags: []string{Tag("old")}},                  // inactive, no manifest: listed
		{VG: "vg0", Name: "kept", UUID: "u-kept", Tags: []string{Tag("kept")}},               // inactive, its manifest there
		{VG: "vg0", Name: "live", UUID: "u-live", Tags: []string{Tag("live")}, Active: true}, // active: the core's orphan
		{VG: "vg0", Name: "two", UUID: "u-two", Tags: []string{Tag("a"), Tag("b")}},          // names no one
		{VG: "vg0", Name: "theirs", UUID: "u-theirs", Tags: []string{"backup"}},              // not volumed's
	}
	vgs := []Group{
		{Name: "vgold", UUID: "g-old", Tags: []string{GroupTag("vgold")}}, // volumed's, no manifest
		{Name: "vgsel", UUID: "g-sel", Tags: []string{GroupTag("vgsel")}}, // named by a manifest
		{Name: "vgforeign", UUID: "g-f"},                                  // not volumed's
		{Name: "vgx", UUID: "g-x", Tags: []string{GroupTag("vgy")}},       // a tag of another name: not made as vgx
	}
	got := Leftovers(lvs, vgs, map[string]bool{"kept": true}, map[string]bool{"vgsel": true})
	if len(got) != 2 || !strings.Contains(got[0], "inactive LV vg0/old (uuid u-old)") || !strings.Contains(got[1], "volume group vgold (uuid g-old)") {
		t.Errorf("Leftovers = %q, want the inactive LV vg0/old and the VG vgold", got)
	}
	if got := Leftovers(lvs, vgs, map[string]bool{"kept": true, "old": true}, map[string]bool{"vgsel": true, "vgold": true}); len(got) != 0 {
		t.Errorf("Leftovers with every one named = %q, want none", got)
	}
}

// AnyPV reads the label of every disk and partition the sysfs tree
// lists, but for loop, dm and ram devices.
func TestAnyPV(t *testing.T) {
	sys, dev := t.TempDir(), t.TempDir()
	disk := func(name string, b []byte) {
		if err := os.MkdirAll(filepath.Join(sys, "class", "block", name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, "class", "block", name, "size"), []byte("8\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dev, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disk("vda", make([]byte, 4096))
	disk("loop0", label(1, PVUUID("vg0", "loop")))
	disk("dm-0", label(1, PVUUID("vg0", "dm")))
	if AnyPV(sys, dev) {
		t.Error("AnyPV with labels on a loop and a dm device only = true, want false")
	}
	disk("vdb1", label(1, PVUUID("vg0", "part")))
	if !AnyPV(sys, dev) {
		t.Error("AnyPV with a labelled partition = false, want true")
	}
}

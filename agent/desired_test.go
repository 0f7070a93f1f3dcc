package agent

import (
	"testing"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
)

// The filesystem registry's other names for a type reach the pure
// decisions through the Desired NewDesired makes: an ext3 filesystem on
// an ext4 volume is kept, on an xfs volume refused (never formatted).
func TestNewDesiredCarriesFilesystemNames(t *testing.T) {
	ext3 := []Signature{{Type: "ext3", Usage: "filesystem", Offset: 1080}}
	for _, c := range []struct {
		fstype string
		keep   bool
	}{{"ext4", true}, {"xfs", false}} {
		spec := &manifest.VolumeSpec{Source: manifest.Source{Kind: "loop"}, Filesystem: &manifest.Filesystem{Type: c.fstype, Format: manifest.FormatIfBlank}}
		d := NewDesired("v", "/m.yaml", spec, false, nil)
		mkfs, _, err := decide.Mkfs(false, ext3, d, false)
		if mkfs {
			t.Errorf("%s volume: ext3 found, yet mkfs decided", c.fstype)
		}
		if kept := err == nil; kept != c.keep {
			t.Errorf("%s volume: ext3 found: kept %v (err %v), want kept %v", c.fstype, kept, err, c.keep)
		}
	}
}

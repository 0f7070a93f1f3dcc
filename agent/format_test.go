package agent

import (
	"testing"

	"github.com/volumed/volumed/agent/manifest"
)

func TestDecideResume(t *testing.T) {
	ext4 := []Signature{{Type: "ext4", Usage: "filesystem"}}
	const ours = "0d2c6b1e-3f4a-4b5c-8d9e-0a1b2c3d4e5f"
	cases := []struct {
		name string
		uuid string
		sigs []Signature
		info FSInfo
		want resumeVerdict
	}{
		{"blank: the ordinary path formats", ours, nil, FSInfo{}, resumeOrdinary},
		{"another kind of signature: the ordinary path refuses", ours, []Signature{{Type: "LVM2_member", Usage: "raid"}}, FSInfo{}, resumeOrdinary},
		{"another filesystem type: refused", ours, []Signature{{Type: "xfs", Usage: "filesystem"}}, FSInfo{UUID: ours}, resumeOrdinary},
		{"an intent of a volumed that chose no UUID: kept", "", ext4, FSInfo{UUID: ours}, resumeKeep},
		{"a filesystem of another UUID: kept", ours, ext4, FSInfo{UUID: "11111111-2222-4333-8444-555555555555"}, resumeKeep},
		{"no UUID readable: kept", ours, ext4, FSInfo{}, resumeKeep},
		{"ours but mounted since: kept", ours, ext4, FSInfo{UUID: ours, EverMounted: true}, resumeKeep},
		{"ours and never mounted: its checker decides", ours, ext4, FSInfo{UUID: ours}, resumeCheck},
		{"ext2 for an ext4 manifest, ours: its checker decides", ours, []Signature{{Type: "ext2", Usage: "filesystem"}}, FSInfo{UUID: ours}, resumeCheck},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := decideResume(c.uuid, c.sigs, c.info, "ext4")
			if got != c.want {
				t.Errorf("decideResume = %d (%s), want %d", got, why, c.want)
			}
		})
	}
}

func TestNewUUIDIsVersion4(t *testing.T) {
	u := newUUID()
	if len(u) != 36 || u[14] != '4' || u == newUUID() {
		t.Errorf("newUUID() = %q", u)
	}
}

// decideMkfs: the interrupted format's own damaged filesystem is the one
// signature formatted over (forced); otherwise decideFormat decides.
func TestDecideMkfs(t *testing.T) {
	ext4 := &manifest.Filesystem{Type: "ext4", Format: manifest.FormatIfBlank}
	fsSig := []Signature{{Type: "ext4", Usage: "filesystem"}}
	cases := []struct {
		name              string
		redo              bool
		sigs              []Signature
		ro                bool
		mkfs, force, fail bool
	}{
		{name: "redo over the half-made filesystem", redo: true, sigs: fsSig, mkfs: true, force: true},
		{name: "blank: made, not forced", mkfs: true},
		{name: "a filesystem there: kept", sigs: fsSig},
		{name: "blank read-only: refused", ro: true, fail: true},
	}
	for _, c := range cases {
		mkfs, force, err := decideMkfs(c.redo, c.sigs, ext4, c.ro)
		if mkfs != c.mkfs || force != c.force || (err != nil) != c.fail {
			t.Errorf("%s: decideMkfs = %v, %v, %v; want %v, %v, failure %v", c.name, mkfs, force, err, c.mkfs, c.force, c.fail)
		}
	}
}

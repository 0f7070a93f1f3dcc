package decide

import (
	"testing"

	"github.com/volumed/volumed/agent/manifest"
)

func TestDecideFormat(t *testing.T) {
	ext4 := wantFS(&manifest.Filesystem{Type: "ext4", Format: manifest.FormatIfBlank}, ext4Also...)
	never := wantFS(&manifest.Filesystem{Type: "ext4", Format: manifest.FormatNever}, ext4Also...)
	noAlso := wantFS(&manifest.Filesystem{Type: "ext4", Format: manifest.FormatIfBlank})
	cases := []struct {
		name    string
		sigs    []Signature
		fs      *Desired
		ro      bool
		format  bool
		wantErr string
	}{
		{"blank is formatted", nil, ext4, false, true, ""},
		{"blank with format never is refused", nil, never, false, false, "is blank and filesystem.format is never"},
		{"blank read-only source", nil, ext4, true, false, "is blank and the source is read-only: cannot format"},
		{"same filesystem is mounted", []Signature{{Type: "ext4", Usage: "filesystem"}}, ext4, false, false, ""},
		{"ext3 mounts as ext4", []Signature{{Type: "ext3", Usage: "filesystem"}}, ext4, false, false, ""},
		// decide knows no filesystem's names: ext3 is kept for ext4 only
		// because the Desired carries the registry's word for it.
		{"ext3 with no other names carried is refused", []Signature{{Type: "ext3", Usage: "filesystem"}}, noAlso, false, false,
			"holds an existing ext3 filesystem but the manifest wants ext4: not reformatted"},
		{"foreign filesystem is never reformatted", []Signature{{Type: "xfs", Usage: "filesystem"}}, ext4, false, false,
			"holds an existing xfs filesystem but the manifest wants ext4: not reformatted"},
		{"partition table refused", []Signature{{Type: "gpt", Usage: "partition_table", Offset: 512}}, ext4, false, false,
			"carries a gpt signature (partition_table, at byte 512): volumed never formats or mounts over it"},
		{"luks refused", []Signature{{Type: "crypto_LUKS", Usage: "crypto"}}, ext4, false, false,
			"carries a crypto_LUKS signature (crypto, at byte 0): volumed never formats or mounts over it"},
		{"two filesystems refused", []Signature{{Type: "ext4", Usage: "filesystem"}, {Type: "xfs", Usage: "filesystem"}}, ext4, false, false,
			"carries several filesystem signatures (ext4, xfs): refusing to guess"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decideFormat(c.sigs, c.fs, c.ro)
			if got != c.format {
				t.Errorf("format = %v, want %v", got, c.format)
			}
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != c.wantErr {
				t.Errorf("error = %q, want %q", gotErr, c.wantErr)
			}
		})
	}
}

func TestDecideResume(t *testing.T) {
	ext4 := []Signature{{Type: "ext4", Usage: "filesystem"}}
	const ours = "0d2c6b1e-3f4a-4b5c-8d9e-0a1b2c3d4e5f"
	cases := []struct {
		name string
		uuid string
		sigs []Signature
		info FSInfo
		want ResumeVerdict
	}{
		{"blank: the ordinary path formats", ours, nil, FSInfo{}, ResumeOrdinary},
		{"another kind of signature: the ordinary path refuses", ours, []Signature{{Type: "LVM2_member", Usage: "raid"}}, FSInfo{}, ResumeOrdinary},
		{"another filesystem type: refused", ours, []Signature{{Type: "xfs", Usage: "filesystem"}}, FSInfo{UUID: ours}, ResumeOrdinary},
		{"an intent of a volumed that chose no UUID: kept", "", ext4, FSInfo{UUID: ours}, ResumeKeep},
		{"a filesystem of another UUID: kept", ours, ext4, FSInfo{UUID: "11111111-2222-4333-8444-555555555555"}, ResumeKeep},
		{"no UUID readable: kept", ours, ext4, FSInfo{}, ResumeKeep},
		{"ours but mounted since: kept", ours, ext4, FSInfo{UUID: ours, EverMounted: true}, ResumeKeep},
		{"ours and never mounted: its checker decides", ours, ext4, FSInfo{UUID: ours}, ResumeCheck},
		{"ext2 for an ext4 manifest, ours: its checker decides", ours, []Signature{{Type: "ext2", Usage: "filesystem"}}, FSInfo{UUID: ours}, ResumeCheck},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := Resume(c.uuid, c.sigs, c.info, want("a"))
			if got != c.want {
				t.Errorf("Resume = %d (%s), want %d", got, why, c.want)
			}
		})
	}
}

// Mkfs: the interrupted format's own damaged filesystem is the one
// signature formatted over (forced); otherwise decideFormat decides.
func TestDecideMkfs(t *testing.T) {
	ext4 := wantFS(&manifest.Filesystem{Type: "ext4", Format: manifest.FormatIfBlank}, ext4Also...)
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
		mkfs, force, err := Mkfs(c.redo, c.sigs, ext4, c.ro)
		if mkfs != c.mkfs || force != c.force || (err != nil) != c.fail {
			t.Errorf("%s: Mkfs = %v, %v, %v; want %v, %v, failure %v", c.name, mkfs, force, err, c.mkfs, c.force, c.fail)
		}
	}
}

package decide

import (
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
)

func TestDecideEncrypt(t *testing.T) {
	ifBlank := &manifest.Filesystem{Type: "ext4", Format: manifest.FormatIfBlank}
	never := &manifest.Filesystem{Type: "ext4", Format: manifest.FormatNever}
	ext4 := []Signature{{Type: "ext4", Usage: "filesystem", Offset: 1080}}
	gpt := []Signature{{Type: "gpt", Usage: "partition_table", Offset: 512}}
	whole := LUKSHeader{Found: true, Whole: true, UUID: "u1"}
	torn := LUKSHeader{Found: true, UUID: "u1", HalfWritten: true}
	foreignTorn := LUKSHeader{Found: true, UUID: "u2"}
	cases := []struct {
		name        string
		interrupted string
		hdr         LUKSHeader
		sigs        []Signature
		fs          *manifest.Filesystem
		want        EncryptVerdict
		err         string
	}{
		{"blank: format", "", LUKSHeader{}, nil, ifBlank, EncryptFormat, ""},
		{"blank, format never: refused", "", LUKSHeader{}, nil, never, EncryptRefuse, "filesystem.format is never"},
		{"a filesystem: refused", "", LUKSHeader{}, ext4, ifBlank, EncryptRefuse, "carries a ext4 signature (filesystem, at byte 1080)"},
		{"a partition table: refused", "", LUKSHeader{}, gpt, ifBlank, EncryptRefuse, "gpt signature"},
		{"a whole header: opened, never formatted", "", whole, nil, ifBlank, EncryptOpen, ""},
		{"a whole header with format never: opened", "", whole, nil, never, EncryptOpen, ""},
		{"a whole header another encrypt was making: opened", "u9", whole, nil, ifBlank, EncryptOpen, ""},
		{"our interrupted encrypt's whole header: its keys completed", "u1", whole, nil, ifBlank, EncryptFormat, ""},
		{"our interrupted encrypt's torn header: written again", "u1", torn, nil, ifBlank, EncryptFormat, ""},
		{"a torn header, no encrypt interrupted: refused", "", torn, nil, ifBlank, EncryptRefuse, "damaged or torn"},
		{"another torn header: refused", "u1", foreignTorn, nil, ifBlank, EncryptRefuse, `UUID "u2"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Encrypt(c.interrupted, c.hdr, c.sigs, c.fs)
			if got != c.want {
				t.Errorf("verdict %d, want %d", got, c.want)
			}
			switch {
			case c.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Errorf("error %v, want one saying %q", err, c.err)
			}
		})
	}
}

package decide

import (
	"testing"

	"github.com/volumed/volumed/store/record"
)

func TestDecideIdentity(t *testing.T) {
	const src, other = "device /dev/loop3", "device /dev/loop4"
	fs := &record.Identity{Volume: "v", Source: src, Filesystem: "aaaa-1111"}
	luks := &record.Identity{Volume: "v", Source: src, LUKS: "cccc-3333", Filesystem: "aaaa-1111"}
	for _, c := range []struct {
		name  string
		known *record.Identity
		src   string
		part  IdentityPart
		seen  string
		blank bool
		want  IdentityVerdict
	}{
		{"nothing recorded (a state from an older volumed): learn", nil, src, PartFilesystem, "bbbb-2222", false, IdentityLearn},
		{"the same filesystem", fs, src, PartFilesystem, "aaaa-1111", false, IdentityMatches},
		{"the same, other case (blkid prints lower case; a record may not)", fs, src, PartFilesystem, "AAAA-1111", false, IdentityMatches},
		{"another filesystem at the same path: refused", fs, src, PartFilesystem, "bbbb-2222", false, IdentityChanged},
		{"a blank device where the volume had a filesystem: refused", fs, src, PartFilesystem, "", true, IdentityChanged},
		{"a blank device of a new volume: formatted, nothing yet", nil, src, PartFilesystem, "", true, IdentityUnknown},
		{"no UUID read on a device that is not blank: go on", fs, src, PartFilesystem, "", false, IdentityUnknown},
		{"recorded for another source (an edited manifest): learn", fs, other, PartFilesystem, "bbbb-2222", false, IdentityLearn},
		{"a blank device of an edited source: formatted", fs, other, PartFilesystem, "", true, IdentityUnknown},
		{"LUKS header the same", luks, src, PartLUKS, "cccc-3333", false, IdentityMatches},
		{"LUKS header another", luks, src, PartLUKS, "dddd-4444", false, IdentityChanged},
		{"LUKS never recorded, filesystem was: learn the header", fs, src, PartLUKS, "cccc-3333", false, IdentityLearn},
		{"LUKS recorded, device blank: refused", luks, src, PartLUKS, "", true, IdentityChanged},
	} {
		if got := Identity(c.known, c.src, c.part, c.seen, c.blank); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

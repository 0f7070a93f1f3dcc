package blank

import (
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	zeros := Zeros{Read: true, Bytes: 6 << 20, Regions: 66, FirstNonZero: -1}
	data := zeros
	data.FirstNonZero = 4096
	tests := []struct {
		name   string
		f      Facts
		blank  bool
		reason string
		says   string
	}{
		{"all zeros", Facts{Device: "/dev/loop1", Zeros: zeros}, true, "", ""},
		{"random bytes, no signature", Facts{Device: "/dev/loop1", Zeros: data}, false, ReasonUnknownData, "offset 4096"},
		{"not read", Facts{Device: "/dev/loop1"}, false, ReasonNotRead, "not known"},
		{"signature", Facts{Device: "d", Zeros: zeros, Signatures: []Signature{{Type: "ext4", Usage: "filesystem", Offset: 1080, Source: "blkid"}}}, false, ReasonSignature, "ext4 (filesystem at byte 1080, found by blkid)"},
		{"kernel-only partition on a zeroed table", Facts{Device: "d", Zeros: zeros, Partitions: []string{"loop3p1"}}, false, ReasonPartitions, "loop3p1"},
		{"held by dm", Facts{Device: "d", Zeros: zeros, Holders: []string{"dm-0"}}, false, ReasonHeld, "dm-0"},
		{"created image needs no read", Facts{Device: "f", Created: true}, true, "", ""},
		{"created image with a signature is not blank", Facts{Device: "f", Created: true, Signatures: []Signature{{Type: "xfs"}}}, false, ReasonSignature, "xfs"},
		{"created but held", Facts{Device: "f", Created: true, Holders: []string{"md0"}}, false, ReasonHeld, "md0"},
		{"signature wins over partitions", Facts{Device: "d", Partitions: []string{"p1"}, Signatures: []Signature{{Type: "gpt"}}}, false, ReasonSignature, "gpt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.f)
			if v.Blank != tt.blank || v.Reason != tt.reason {
				t.Fatalf("Decide = %+v, want blank=%v reason=%q", v, tt.blank, tt.reason)
			}
			if !strings.Contains(v.Message, tt.says) {
				t.Errorf("message %q does not say %q", v.Message, tt.says)
			}
		})
	}
}

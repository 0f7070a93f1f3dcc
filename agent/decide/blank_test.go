package decide

import (
	"strings"
	"testing"

	"github.com/volumed/volumed/store/record"
)

func TestBlankByRecord(t *testing.T) {
	const src, hdr = "loop:/i", "0b1e1a6e-0000-4000-8000-0000000000aa"
	att := func(created bool) *record.Attachment {
		return &record.Attachment{Device: "/dev/loop1", Created: created}
	}
	mapped := func(created bool) *record.Volume {
		return &record.Volume{Attachment: att(created), Mapping: &record.Mapping{Name: "volumed-a", UUID: hdr}}
	}
	ours := &record.Identity{Source: src, LUKS: hdr, How: HowFormatted}
	cases := []struct {
		name string
		rec  *record.Volume
		id   *record.Identity
		want bool
	}{
		{"no record", nil, nil, false},
		{"not attached", &record.Volume{}, nil, false},
		{"an image volumed created", &record.Volume{Attachment: att(true)}, nil, true},
		{"an image found", &record.Volume{Attachment: att(false)}, nil, false},
		{"a header volumed wrote", mapped(false), ours, true},
		{"a header volumed wrote, any attachment", mapped(true), ours, true},
		{"no identity", mapped(true), nil, false},
		{"a header found", mapped(false), &record.Identity{Source: src, LUKS: hdr, How: HowAdopted}, false},
		{"another header", mapped(false), &record.Identity{Source: src, LUKS: "0b1e1a6e-0000-4000-8000-0000000000bb", How: HowFormatted}, false},
		{"another source's", mapped(false), &record.Identity{Source: "loop:/other", LUKS: hdr, How: HowFormatted}, false},
		{"a filesystem made on it", mapped(false), &record.Identity{Source: src, LUKS: hdr, Filesystem: "f", How: HowFormatted}, false},
		{"the header's case", mapped(false), &record.Identity{Source: src, LUKS: strings.ToUpper(hdr), How: HowFormatted}, true},
	}
	for _, c := range cases {
		if got := BlankByRecord(c.rec, c.id, src); got != c.want {
			t.Errorf("%s: BlankByRecord = %v, want %v", c.name, got, c.want)
		}
	}
}

package loop

import "testing"

func TestCheckedPath(t *testing.T) {
	for _, c := range []struct {
		name                               string
		wanted, key, attachedFor, recorded string
		want                               string
	}{
		{"attached for the manifest's image", "/i/a.img", "loop file /i/a.img", "loop file /i/a.img", "/i/a.img", "/i/a.img"},
		{"renamed since: the manifest's path is checked", "/i/a.img", "loop file /i/a.img", "loop file /i/a.img", "/i/a.img.old", "/i/a.img"},
		{"loop.file edited: the old image is checked", "/i/b.img", "loop file /i/b.img", "loop file /i/a.img", "/i/a.img", "/i/a.img"},
		{"a record older than Source: the manifest's", "/i/a.img", "loop file /i/a.img", "", "/i/a.img", "/i/a.img"},
		{"going away: the recorded one", "", "", "loop file /i/a.img", "/i/a.img", "/i/a.img"},
	} {
		if got := checkedPath(c.wanted, c.key, c.attachedFor, c.recorded); got != c.want {
			t.Errorf("%s: checkedPath = %q, want %q", c.name, got, c.want)
		}
	}
}

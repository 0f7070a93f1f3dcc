package loop

import "testing"

// An identity renders and parses back, including a path with an "@".
func TestParseIdentity(t *testing.T) {
	d := Device{BackingFile: "/srv/img@v2/data.img", BackingDev: 2049, BackingIno: 131}
	file, dev, ino, ok := ParseIdentity(d.Identity())
	if !ok || file != d.BackingFile || dev != d.BackingDev || ino != d.BackingIno {
		t.Errorf("ParseIdentity(%q) = %q %d %d %v", d.Identity(), file, dev, ino, ok)
	}
	for _, bad := range []string{"", "nvme:x@1:2", "loop:/x", "loop:/x@1", "loop:/x@a:2", "loop:/x@1:b"} {
		if _, _, _, ok := ParseIdentity(bad); ok {
			t.Errorf("ParseIdentity(%q) ok, want refused", bad)
		}
	}
}

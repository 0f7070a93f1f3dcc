package loop

import (
	"testing"

	loopdev "github.com/volumed/volumed/drivers/loop"
	"github.com/volumed/volumed/store"
)

func TestIsRecorded(t *testing.T) {
	const tag = "volumed:ours"
	dev := func(file string, ino uint64, tag string) loopdev.Device {
		return loopdev.Device{Path: "/dev/loop3", Number: 3, BackingFile: file, BackingDev: 2049, BackingIno: ino, Tag: tag}
	}
	owned := store.Attachment{Kind: Name, Device: "/dev/loop3", Identity: "loop:/img/v.img@2049:12", Owned: true}
	found := owned
	found.Owned = false
	cases := []struct {
		name string
		rec  store.Attachment
		dev  loopdev.Device
		want bool
	}{
		{"ours, as recorded", owned, dev("/img/v.img", 12, tag), true},
		{"ours, image moved away since", owned, dev("/old/v.img", 12, tag), true},
		{"another inode", owned, dev("/img/v.img", 13, tag), false},
		{"the inode reused by a file someone else attached", owned, dev("/img/other.img", 12, ""), false},
		{"the same numbers on another agent's device", owned, dev("/img/v.img", 12, "volumed:theirs"), false},
		{"adopted, as recorded", found, dev("/img/v.img", 12, ""), true},
		{"adopted, the inode now another file's", found, dev("/img/other.img", 12, ""), false},
		{"a record that is not a loop device's", store.Attachment{Identity: "nvme:x", Owned: true}, dev("/img/v.img", 12, tag), false},
	}
	for _, c := range cases {
		if got := isRecorded(c.rec, tag, c.dev); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

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

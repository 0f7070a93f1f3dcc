package decide

import (
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store/record"
)

func TestPendingChanges(t *testing.T) {
	base := loopWant(tgt("/t", false))
	otherFile := loopWant(tgt("/t", false))
	otherFile.Caps = loopCaps("/img/new.img")
	xfs := loopWant(tgt("/t", false))
	xfs.Spec.Filesystem = &manifest.Filesystem{Type: "xfs"}
	journal := loopWant(tgt("/t", false))
	journal.Spec.Filesystem = &manifest.Filesystem{Type: "ext4", MountOptions: []string{"data=journal"}}
	refused := madeWith(base)
	refused.Staging.Refused = &record.Refusal{Options: StagingOptions(journal), Error: "invalid argument"}
	legacy := madeWith(base)
	legacy.Attachment.Source = ""
	raw := &Desired{Name: "a", Kind: "loop", Caps: base.Caps, Block: true, Targets: []DesiredTarget{{Path: "/dev-t", Block: true}}, Spec: &manifest.VolumeSpec{}}
	rawEnc := &Desired{Name: "a", Kind: "loop", Caps: base.Caps, Block: true, Targets: raw.Targets,
		Spec: &manifest.VolumeSpec{Encryption: &manifest.Encryption{LUKS2: &manifest.LUKS2{Keys: []manifest.LUKS2Key{{File: "/k"}}}}}}
	rawPublished := func() *record.Volume {
		return &record.Volume{Name: "a", Kind: "loop", Attachment: madeWith(base).Attachment, Targets: []record.MountRecord{{Path: "/dev-t", Owned: true}}}
	}

	cases := []struct {
		name string
		d    *Desired
		rec  *record.Volume
		want []string // reason: words the message must hold
	}{
		{"as made", base, madeWith(base), nil},
		{"new image file", otherFile, madeWith(base), []string{"SourceChanged: source (now loop file /img/new.img) not applied", "/img/a.img is still attached", "state: absent"}},
		{"new filesystem type", xfs, madeWith(base), []string{"FilesystemTypeChanged: filesystem.type xfs not applied", "holds ext4"}},
		{"refused remount", journal, refused, []string{"RemountRefused: mount options +[data=journal] not applied", "ext4 refused a live remount (invalid argument)", "next mount"}},
		{"refused options no longer wanted", base, refused, nil},
		{"ext3 on disk serves an ext4 manifest", base, func() *record.Volume { v := madeWith(base); v.Staging.FSType = "ext3"; return v }(), nil},
		{"record older than the source field", otherFile, legacy, nil},
		{"encryption added to a mounted volume", encrypted(loopWant(tgt("/t", false)), "/k"), madeWith(base),
			[]string{"EncryptionAdded: encryption not applied", "only ever encrypts a blank device"}},
		{"encrypted as made", encrypted(loopWant(tgt("/t", false)), "/k"), mapped(madeWith(base)), nil},
		{"encryption removed from a mounted volume", base, mapped(madeWith(base)),
			[]string{"EncryptionRemoved: removing spec.encryption is not applied", "LUKS2 volume u (open as /dev/mapper/volumed-a)"}},
		{"encryption added to a published raw block volume", rawEnc, rawPublished(),
			[]string{"EncryptionAdded: encryption not applied", "raw block data (published at /dev-t)", "only ever encrypts a blank device"}},
		{"encryption added to a raw block volume not yet published: opened, nothing pending", rawEnc, &record.Volume{Name: "a", Kind: "loop", Attachment: madeWith(base).Attachment}, nil},
		{"encryption removed from a published raw block volume", raw, mapped(rawPublished()),
			[]string{"EncryptionRemoved: removing spec.encryption is not applied", "raw block data (published at /dev-t)"}},
		// Plan never opens under a published target, staging mount or not
		// (EncryptionChange), so this is pending too.
		{"encryption added while a target outlives its staging mount", encrypted(loopWant(tgt("/t", false)), "/k"),
			func() *record.Volume { v := madeWith(base); v.Staging = nil; return v }(),
			[]string{"EncryptionAdded: encryption not applied", "the volume's data (published at /t)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := PendingChanges(c.d, c.rec)
			if len(c.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("pending %+v, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("pending %+v, want one", got)
			}
			text := got[0].Reason + ": " + got[0].Message
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
		})
	}
}

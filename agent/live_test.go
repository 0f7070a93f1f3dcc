package agent

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// madeWith is a converged volume whose mounts were made for d.
func madeWith(d *Desired) *store.Volume {
	v := have(d.Name, true, true)
	v.Attachment.Source = d.Caps.Key
	v.Staging.FSType = d.Spec.Filesystem.Type
	v.Staging.Options = stagingOptions(d)
	for _, t := range d.Targets {
		v.Targets = append(v.Targets, targetRecord(0, t, bindWords(bindOptions(d, t))))
	}
	return v
}

// loopWant is volume "a", a loop volume on /img/a.img, as the remount
// and pending-change rules see it.
func loopWant(targets ...DesiredTarget) *Desired {
	d := want("a", targets...)
	d.Caps = loopCaps("/img/a.img")
	return d
}

// loopCaps is what kinds/loop says of an image (the core sees no more).
func loopCaps(file string) manifest.Caps {
	return manifest.Caps{ImageFile: file, Key: "loop file " + file}
}

func TestPlanRemountsChangedOptions(t *testing.T) {
	base := loopWant(tgt("/t", false))
	edited := func(edit func(d *Desired)) *Desired {
		d := loopWant(tgt("/t", false))
		fs := *d.Spec.Filesystem
		d.Spec.Filesystem = &fs
		edit(d)
		return d
	}
	noatime := edited(func(d *Desired) { d.Spec.Filesystem.MountOptions = []string{"noatime"} })
	suid := edited(func(d *Desired) { d.Spec.Filesystem.AllowSuid = true })
	ro := edited(func(d *Desired) { d.Targets[0].ReadOnly = true })

	refused := madeWith(base)
	refused.Staging.Refused = &store.Refusal{Options: stagingOptions(noatime), Error: "invalid argument"}
	legacy := madeWith(base)
	legacy.Staging.Options, legacy.Targets[0].Options = nil, nil
	legacyTarget := madeWith(base)
	legacyTarget.Targets[0].Options = nil
	stagingDone := madeWith(suid)
	stagingDone.Targets = madeWith(base).Targets

	cases := []struct {
		name string
		d    *Desired
		rec  *store.Volume
		want []Op
	}{
		{"as made: nothing", base, madeWith(base), nil},
		{"mountOptions edited: the staging mount", noatime, madeWith(base), []Op{{Volume: "a", Kind: OpRemount}}},
		{"allowSuid edited: staging first", suid, madeWith(base), []Op{{Volume: "a", Kind: OpRemount}}},
		{"allowSuid edited, staging done: then the target", suid, stagingDone, []Op{{Volume: "a", Kind: OpRemount, Target: suid.Targets[0]}}},
		{"readOnly edited: the target alone", ro, madeWith(base), []Op{{Volume: "a", Kind: OpRemount, Target: ro.Targets[0]}}},
		{"a refused remount is not tried again for the same options", noatime, refused, nil},
		{"a refused remount is tried for other options", suid, refused, []Op{{Volume: "a", Kind: OpRemount}}},
		{"a mount of unknown options is remounted to the manifest's", base, legacy, []Op{{Volume: "a", Kind: OpRemount}}},
		{"a target of unknown options too", base, legacyTarget, []Op{{Volume: "a", Kind: OpRemount, Target: base.Targets[0]}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Plan(map[string]*Desired{"a": c.d}, map[string]*store.Volume{"a": c.rec})
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Plan:\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

func TestPendingChanges(t *testing.T) {
	base := loopWant(tgt("/t", false))
	otherFile := loopWant(tgt("/t", false))
	otherFile.Caps = loopCaps("/img/new.img")
	xfs := loopWant(tgt("/t", false))
	xfs.Spec.Filesystem = &manifest.Filesystem{Type: "xfs"}
	journal := loopWant(tgt("/t", false))
	journal.Spec.Filesystem = &manifest.Filesystem{Type: "ext4", MountOptions: []string{"data=journal"}}
	refused := madeWith(base)
	refused.Staging.Refused = &store.Refusal{Options: stagingOptions(journal), Error: "invalid argument"}
	legacy := madeWith(base)
	legacy.Attachment.Source = ""
	raw := &Desired{Name: "a", Driver: "loop", Caps: base.Caps, Block: true, Targets: []DesiredTarget{{Path: "/dev-t", Block: true}}, Spec: &manifest.VolumeSpec{}}
	rawEnc := &Desired{Name: "a", Driver: "loop", Caps: base.Caps, Block: true, Targets: raw.Targets,
		Spec: &manifest.VolumeSpec{Encryption: &manifest.Encryption{LUKS2: &manifest.LUKS2{Keys: []manifest.LUKS2Key{{File: "/k"}}}}}}
	rawPublished := func() *store.Volume {
		return &store.Volume{Name: "a", Driver: "loop", Attachment: madeWith(base).Attachment, Targets: []store.MountRecord{{Path: "/dev-t", Owned: true}}}
	}

	cases := []struct {
		name string
		d    *Desired
		rec  *store.Volume
		want []string // reason: words the message must hold
	}{
		{"as made", base, madeWith(base), nil},
		{"new image file", otherFile, madeWith(base), []string{"SourceChanged: source (now loop file /img/new.img) not applied", "/img/a.img is still attached", "state: absent"}},
		{"new filesystem type", xfs, madeWith(base), []string{"FilesystemTypeChanged: filesystem.type xfs not applied", "holds ext4"}},
		{"refused remount", journal, refused, []string{"RemountRefused: mount options +[data=journal] not applied", "ext4 refused a live remount (invalid argument)", "next mount"}},
		{"refused options no longer wanted", base, refused, nil},
		{"ext3 on disk serves an ext4 manifest", base, func() *store.Volume { v := madeWith(base); v.Staging.FSType = "ext3"; return v }(), nil},
		{"record older than the source field", otherFile, legacy, nil},
		{"encryption added to a mounted volume", encrypted(loopWant(tgt("/t", false)), "/k"), madeWith(base),
			[]string{"EncryptionAdded: encryption not applied", "only ever encrypts a blank device"}},
		{"encrypted as made", encrypted(loopWant(tgt("/t", false)), "/k"), mapped(madeWith(base)), nil},
		{"encryption removed from a mounted volume", base, mapped(madeWith(base)),
			[]string{"EncryptionRemoved: removing spec.encryption is not applied", "LUKS2 volume u (open as /dev/mapper/volumed-a)"}},
		{"encryption added to a published raw block volume", rawEnc, rawPublished(),
			[]string{"EncryptionAdded: encryption not applied", "raw block data (published at /dev-t)", "only ever encrypts a blank device"}},
		{"encryption added to a raw block volume not yet published: opened, nothing pending", rawEnc, &store.Volume{Name: "a", Driver: "loop", Attachment: madeWith(base).Attachment}, nil},
		{"encryption removed from a published raw block volume", raw, mapped(rawPublished()),
			[]string{"EncryptionRemoved: removing spec.encryption is not applied", "raw block data (published at /dev-t)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := pendingChanges(c.d, c.rec)
			if len(c.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("pending %+v, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("pending %+v, want one", got)
			}
			text := got[0].reason + ": " + got[0].message
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
		})
	}
}

// remounter answers every remount with err.
type remounter struct {
	Mounter
	err   error
	calls int
}

func (r *remounter) Remount(string, int, []string, []string) error { r.calls++; return r.err }

// A remount the filesystem refuses is recorded, so that the next pass
// does not try it again and the volume shows what is pending; one that
// was only busy is retried.
func TestRefusedRemountIsRecorded(t *testing.T) {
	base := loopWant(tgt("/t", false))
	journal := loopWant(tgt("/t", false))
	journal.Spec.Filesystem = &manifest.Filesystem{Type: "ext4", MountOptions: []string{"data=journal"}}
	for _, c := range []struct {
		name        string
		err         error
		wantPlanned bool
	}{
		{"refused", fmt.Errorf("remount /s/a: %w", unix.EINVAL), false},
		{"busy", fmt.Errorf("remount /s/a: %w", unix.EBUSY), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := sessionAgent(t, &fakeTarget{})
			m := &remounter{err: c.err}
			a.cfg.Mounter = m
			if err := a.state.Adopt(madeWith(base)); err != nil {
				t.Fatal(err)
			}
			if err := a.opRemount(journal, DesiredTarget{}); !errors.Is(err, c.err) {
				t.Fatalf("opRemount = %v, want %v", err, c.err)
			}
			rec := a.state.Get("a")
			planned := len(Plan(map[string]*Desired{"a": journal}, map[string]*store.Volume{"a": rec})) > 0
			if planned != c.wantPlanned {
				t.Errorf("remount planned again: %v, want %v", planned, c.wantPlanned)
			}
			if p := pendingChanges(journal, rec); (len(p) == 1) == c.wantPlanned {
				t.Errorf("pending %+v", p)
			}
			if !slices.Equal(rec.Staging.Options, stagingOptions(base)) {
				t.Errorf("recorded options %v after a failed remount, want the old ones", rec.Staging.Options)
			}
		})
	}
}

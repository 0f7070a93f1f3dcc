package decide

import (
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store/record"
)

// The tests' volumes: "want" is what a manifest asks of a volume, "have"
// what the records say of it.

func want(name string, targets ...DesiredTarget) *Desired {
	return &Desired{Name: name, Kind: "loop", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4"}}, FSAlso: ext4Also, Targets: targets}
}

// ext4Also is what the filesystem registry says blkid may report of an
// ext4 filesystem besides ext4; the agent copies it into Desired.
var ext4Also = []string{"ext2", "ext3"}

// wantFS is a volume that wants fs, with the registry's other names for
// it (also).
func wantFS(fs *manifest.Filesystem, also ...string) *Desired {
	return &Desired{Name: "a", Kind: "loop", Spec: &manifest.VolumeSpec{Filesystem: fs}, FSAlso: also}
}

func tgt(p string, ro bool) DesiredTarget { return DesiredTarget{Path: p, ReadOnly: ro} }

func have(name string, attached, staged bool, targets ...record.MountRecord) *record.Volume {
	v := &record.Volume{Name: name, Kind: "loop", Targets: targets}
	if attached {
		v.Attachment = &record.Attachment{Kind: "loop", Device: "/dev/loop1", Identity: "loop:/i@1:2", Owned: true}
	}
	if staged {
		v.Staging = &record.MountRecord{Path: "/s/" + name, Owned: true, Options: []string{"nosuid", "nodev"}}
	}
	return v
}

func pub(p string, ro bool) record.MountRecord {
	return record.MountRecord{Path: p, ReadOnly: ro, Owned: true, Options: BindWords(BindOptions{ReadOnly: ro, NoSuid: true, NoDev: true})}
}

// madeWith is a converged volume whose mounts were made for d.
func madeWith(d *Desired) *record.Volume {
	v := have(d.Name, true, true)
	v.Attachment.Source = d.Caps.Key
	v.Staging.FSType = d.Spec.Filesystem.Type
	v.Staging.Options = StagingOptions(d)
	for _, t := range d.Targets {
		v.Targets = append(v.Targets, record.MountRecord{Path: t.Path, SubPath: t.SubPath, ReadOnly: t.ReadOnly, Owned: true, Options: BindWords(BindOptionsFor(d, t))})
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

func encrypted(d *Desired, keyFiles ...string) *Desired {
	l := &manifest.LUKS2{}
	for _, k := range keyFiles {
		l.Keys = append(l.Keys, manifest.LUKS2Key{File: k})
	}
	spec := *d.Spec
	spec.Encryption = &manifest.Encryption{LUKS2: l}
	spec.Filesystem = &manifest.Filesystem{Type: "ext4", Format: manifest.FormatIfBlank}
	d.Spec = &spec
	return d
}

func mapped(v *record.Volume) *record.Volume {
	name := "volumed-" + v.Name
	v.Mapping = &record.Mapping{Name: name, UUID: "u", Device: "/dev/mapper/" + name, KeyKind: "file"}
	return v
}

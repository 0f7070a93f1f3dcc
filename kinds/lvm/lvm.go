// Package lvm is the `lvm` source kind: a linear logical volume in a
// volume group that already exists (drivers/lvm). volumed creates the LV
// when it is missing, tagged volumed:<volume>, activates it at start (a
// reboot may leave it inactive) and finds it again by the VG, the tag and
// its UUID, never by its name alone. It never removes, shrinks or renames
// an LV. An LV of the wanted name volumed did not create is used in place
// and never changed. See docs/lvm.md.
package lvm

import (
	"fmt"
	"strings"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/kind"
)

// Name is the manifest key and the driver's name.
const Name = "lvm"

// Source is `source.lvm`: a logical volume (linear, striped, raid1 or
// thin) in an existing volume group, created if missing (tagged
// volumed:<volume>, found again by that tag and its UUID), activated at
// start, deactivated at teardown, never removed or shrunk; one of that
// name volumed did not create is used as it is.
type Source struct {
	// VolumeGroup is the existing VG the LV is in.
	VolumeGroup string `yaml:"volumeGroup" json:"volumeGroup"`
	// Name is the LV's name; the volume's name when empty.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Size of the LV (e.g. 10Gi; or extents), rounded up by lvm2 to the VG's extent
	// size: volumed creates it so, and extends an LV it created when the
	// size grows (then its filesystem, with filesystem.grow); a smaller
	// size is refused, never shrunk. An LV it did not create is never
	// resized.
	Size string `yaml:"size,omitempty" json:"size,omitempty"`
	// Extents sizes the LV volumed creates as lvm2's percentages do, in
	// place of size: N%FREE (of the VG's free space), N%VG (of its
	// size) or N%PVS (of its PVs' free space), N from 1 to 100. The LV
	// is made once at what that comes to; it is never resized to it
	// again (with filesystem.grow the filesystem follows an LV extended
	// by hand). Not for thin LVs, whose size is virtual.
	Extents string `yaml:"extents,omitempty" json:"extents,omitempty"`
	// Grow, in place of size or extents: the LV follows its volume
	// group. volumed makes it of every free extent of the VG, and
	// extends it (then its filesystem, with filesystem.grow) by the
	// extents the VG gains: a disk createVolumeGroup.grow adds, or a
	// vgextend by hand. Type linear only; never shrunk.
	Grow bool `yaml:"grow,omitempty" json:"grow,omitempty"`

	// Type of the LV volumed creates: linear (the default), striped,
	// raid1 or thin.
	Type string `yaml:"type,omitempty" json:"type,omitempty"`
	// ThinPool is the existing thin pool (in volumeGroup) a thin LV is
	// made in; required for type thin, refused otherwise.
	ThinPool string `yaml:"thinPool,omitempty" json:"thinPool,omitempty"`
	// CreateVolumeGroup: volumed makes volumeGroup from blank disks when
	// it is missing, and keeps it; see CreateGroup.
	CreateVolumeGroup *CreateGroup `yaml:"createVolumeGroup,omitempty" json:"createVolumeGroup,omitempty"`
	// Stripes of a striped LV (2 or more, each on its own PV); required
	// for type striped, refused otherwise.
	Stripes int `yaml:"stripes,omitempty" json:"stripes,omitempty"`
	// StripeSize of a striped LV (a power of two, 4Ki or more; lvm2's
	// default, 64Ki, when empty).
	StripeSize string `yaml:"stripeSize,omitempty" json:"stripeSize,omitempty"`
	// Mirrors of a raid1 LV: its copies besides the first, each on its
	// own PV; 1 (two legs) when unset or 0. Refused for other types.
	Mirrors int `yaml:"mirrors,omitempty" json:"mirrors,omitempty"`

	size, stripeSize int64
}

// Kind describes the lvm source kind.
type Kind struct{}

func (Kind) Name() string { return Name }

// Traits: a disk of the VG appearing retries the volume.
func (Kind) Traits() kind.Traits { return kind.Traits{AwaitsDisk: true} }
func (Kind) New() any            { return new(Source) }

func (Kind) Needs(spec any) hostcheck.Needs {
	n := hostcheck.Needs{
		Programs: []hostcheck.Program{{Name: lvmdrv.Program, Why: "creates and activates LVM logical volumes", Package: "lvm2"}},
		Modules:  []hostcheck.Module{{Name: "dm-mod", What: "device-mapper", Dev: "mapper/control"}},
	}
	s, _ := spec.(*Source)
	if s != nil && s.Type == lvmdrv.Raid1 {
		n.Modules = append(n.Modules, hostcheck.Module{Name: "dm-raid", What: "LVM raid1 (mirrored) volumes"})
	}
	if s != nil && (s.Type == lvmdrv.Thin || s.CreateVolumeGroup != nil && len(s.CreateVolumeGroup.ThinPools) > 0) {
		n.Modules = append(n.Modules, hostcheck.Module{Name: "dm-thin-pool", What: "LVM thin provisioning"})
		// lvm2 runs thin_check when it activates a thin pool.
		n.Programs = append(n.Programs, hostcheck.Program{Name: "thin_check", Why: "checks a thin pool's metadata when lvm2 activates it", Package: "thin-provisioning-tools"})
	}
	return n
}

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{
		{Type: "Source", Prop: "size", Check: kind.Size},
		{Type: "Source", Prop: "", Check: kind.OneOf{"size", "extents", "grow"}},
		{Type: "Source", Prop: "type", Check: kind.Enum{lvmdrv.Linear, lvmdrv.Striped, lvmdrv.Raid1, lvmdrv.Thin}},
		{Type: "Source", Prop: "stripes", Check: kind.Min(2)},
		{Type: "Source", Prop: "stripeSize", Check: kind.Size},
		{Type: "Source", Prop: "mirrors", Check: kind.Min(0)},
		{Type: "CreateGroup", Prop: "extentSize", Check: kind.Size},
		{Type: "ThinPool", Prop: "size", Check: kind.Size},
		{Type: "ThinPool", Prop: "metadataSize", Check: kind.Size},
	}
}

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	s := spec.(*Source)
	if s.VolumeGroup == "" {
		c.Report("volumeGroup", "required: the name of an existing LVM volume group")
	} else if why := lvmdrv.CheckName(s.VolumeGroup); why != "" {
		c.Report("volumeGroup", why)
	}
	if s.Name != "" {
		if why := lvmdrv.CheckLVName(s.Name); why != "" {
			c.Report("name", why)
		}
	}
	checkType(s, c)
	groupClaims := checkGroup(s, c)
	checkSize(s, c)
	checkLayout(s, c)
	// Size is kept (grown to, a smaller one refused): the LV's own. The
	// type, pool and layout are in the key: an LV is not turned into
	// another.
	layout := s.Type + " " + s.ThinPool + layoutKey(s)
	caps := manifest.Caps{Key: "lvm " + s.VolumeGroup + "/" + s.Name + " " + layout, Size: s.size, SizeField: "size", RefuseShrink: true}
	if s.Extents != "" || s.Grow {
		// Made once at the percentage, or following the VG: no size to
		// keep or expand.
		caps.SizeField = ""
	}
	if s.Name == "" {
		caps.Key = "lvm in " + s.VolumeGroup + " named for the volume " + layout
		// No claim: the default name is the volume's, unique already; a
		// name: equal to another volume's is refused at attach by the tag.
		caps.Claims = groupClaims
		return caps
	}
	caps.Claims = append(groupClaims, manifest.Claim{Key: s.VolumeGroup + "/" + s.Name, Field: "name", What: "LV " + s.VolumeGroup + "/" + s.Name})
	return caps
}

// checkType: linear (the default), striped, raid1 or thin, and a thin
// pool exactly for thin.
func checkType(s *Source, c *manifest.Check) {
	switch s.Type {
	case "":
		s.Type = lvmdrv.Linear
	case lvmdrv.Linear, lvmdrv.Striped, lvmdrv.Raid1, lvmdrv.Thin:
	default:
		c.Report("type", fmt.Sprintf("%q is not an LV type volumed creates: linear, striped, raid1 or thin", s.Type))
	}
	switch {
	case s.Type == lvmdrv.Thin && s.ThinPool == "":
		c.Report("thinPool", "required for type thin: the name of an existing thin pool in the volume group")
	case s.Type != lvmdrv.Thin && s.ThinPool != "":
		c.Report("thinPool", "only for type thin: a "+s.Type+" LV takes its extents from the volume group")
	case s.ThinPool != "":
		if why := lvmdrv.CheckLVName(s.ThinPool); why != "" {
			c.Report("thinPool", why)
		}
	}
}

func (Kind) Attacher(kind.Env) agent.Attacher { return attacher{} }

// Identity of an LV: its VG and its UUID, e.g. `lvm:vg0/k3Jd1B-…`.
func Identity(lv lvmdrv.LV) string { return Name + ":" + lv.VG + "/" + lv.UUID }

// ParseIdentity reads an Identity back.
func ParseIdentity(id string) (vg, uuid string, err error) {
	rest, ok := strings.CutPrefix(id, Name+":")
	vg, uuid, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || vg == "" || uuid == "" {
		return "", "", fmt.Errorf("not an LVM identity: %q", id)
	}
	return vg, uuid, nil
}

package lvm

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// GroupTag is the tag volumed puts on a VG it creates: volumed:<vg>.
// VG tags are not LV tags: no volume's LV is ever taken for it.
func GroupTag(vg string) string { return TagPrefix + vg }

// GroupWant is a VG volumed keeps: made from the disks a selector
// picks, grown with new ones when Grow is set.
type GroupWant struct {
	VG         string
	ExtentSize int64 // bytes; 0 leaves lvm2's default
	Grow       bool
}

// Disk is one whole disk as the VG's decision sees it.
type Disk struct {
	Path     string // node, e.g. /dev/vdb
	Identity string // device:wwn:…, device:serial:… or device:path:…
	// Match: the VG's selector picks it.
	Match bool
	// Blank by the one blank rule (internal/blank, the disk's facts);
	// NotBlank is its reason when not.
	Blank    bool
	NotBlank string
	// Label is the UUID of the LVM2 label on the disk, "" when none.
	Label string
}

// PV is one physical volume as `pvs` reports it.
type PV struct {
	Name string // the device, e.g. /dev/vdb
	UUID string
	VG   string // "" for an orphan PV
}

// Group is a VG as the group report shows it.
type Group struct {
	Name, UUID string
	Tags       []string
}

// GroupAction is what PlanGroup says to do.
type GroupAction string

// Group actions.
const (
	// GroupUse: the VG is volumed's and has what it should.
	GroupUse GroupAction = "use"
	// GroupAdopt: a VG of that name volumed did not create: its LVs are
	// used, it is never changed.
	GroupAdopt GroupAction = "adopt"
	// GroupCreate: pvcreate the disks in PVCreate, then vgcreate over Join.
	GroupCreate GroupAction = "create"
	// GroupExtend: pvcreate the disks in PVCreate, then vgextend with Join.
	GroupExtend GroupAction = "extend"
	// GroupWait: nothing to make it from yet; Why says so.
	GroupWait GroupAction = "wait"
	// GroupRefuse: the name is ambiguous; Why says so.
	GroupRefuse GroupAction = "refuse"
)

// GroupStep is PlanGroup's answer.
type GroupStep struct {
	Action GroupAction
	// PVCreate are the blank disks to make PVs on (with PVUUID).
	PVCreate []Disk
	// Join are the devices vgcreate or vgextend takes: the new PVs and
	// volumed's own orphan PVs (left by a crash before vgcreate).
	Join []string
	// Devices are every device volumed manages for the VG: its PVs and
	// Join. lvm2 is run with a filter of exactly these.
	Devices []string
	// Why says why it waits, refuses or adopts; Notes name the disks the
	// selector picks that are left alone, and why.
	Why   string
	Notes []string
}

// PlanGroup is what to do for w over the host's VGs of that name, its
// disks and the PVs lvm2 reports on volumed's own devices. A PV is
// volumed's by its UUID (OursFor), never by a name: it is never made
// twice, and a crash between pvcreate and vgcreate leaves one that is
// joined, not made again. Only a blank disk (the one rule) is ever made
// a PV; nothing is ever removed from a VG or wiped.
func PlanGroup(w GroupWant, groups []Group, disks []Disk, pvs []PV) GroupStep {
	var named []Group
	for _, g := range groups {
		if g.Name == w.VG {
			named = append(named, g)
		}
	}
	if len(named) > 1 {
		return GroupStep{Action: GroupRefuse, Why: fmt.Sprintf("%d volume groups are named %s on this host: volumed cannot tell which is meant; rename the others (vgrename by UUID)", len(named), w.VG)}
	}
	if why := Adopted(w.VG, groups); why != "" {
		return GroupStep{Action: GroupAdopt, Why: why}
	}
	s := joinable(w, disks, pvs)
	switch {
	case len(named) == 0 && len(s.Join) == 0:
		s.Action, s.Why = GroupWait, fmt.Sprintf("no blank disk the selector picks to make volume group %s from", w.VG)
		if len(s.Notes) > 0 {
			s.Why += ": " + strings.Join(s.Notes, "; ")
		}
	case len(named) == 0:
		s.Action = GroupCreate
	case w.Grow && len(s.Join) > 0:
		s.Action = GroupExtend
	default:
		s.Action, s.PVCreate, s.Join = GroupUse, nil, nil
		s.Devices = s.members
	}
	return s.GroupStep
}

// Adopted says, when the one VG named vg on the host is not volumed's
// (no tag volumed:<vg>), that it is used read-only; "" otherwise.
func Adopted(vg string, groups []Group) string {
	var named []Group
	for _, g := range groups {
		if g.Name == vg {
			named = append(named, g)
		}
	}
	if len(named) != 1 || slices.Contains(named[0].Tags, GroupTag(vg)) {
		return ""
	}
	return fmt.Sprintf("volume group %s was not created by volumed (no tag %s): adopted read-only, its LVs used as they are, nothing created, extended or changed in it", vg, GroupTag(vg))
}

// plan is a GroupStep being built, with the VG's members apart.
type plan struct {
	GroupStep
	members []string
}

// joinable sorts the disks: the VG's own PVs, volumed's orphan PVs
// (joined again, never made again), the blank disks the selector picks
// (made PVs), and those left alone.
func joinable(w GroupWant, disks []Disk, pvs []PV) plan {
	var p plan
	for _, d := range disks {
		pv, reported := pvOf(d, pvs)
		switch {
		case d.Label != "" && OursFor(w.VG, d.Label):
			switch {
			case reported && pv.VG == w.VG:
				p.members = append(p.members, d.Path)
			case reported && pv.VG != "":
				p.Notes = append(p.Notes, fmt.Sprintf("%s: a PV volumed made for %s is in volume group %s: left alone", d.Path, w.VG, pv.VG))
			default: // an orphan PV of ours, or not reported yet: pvs decides next time
				p.Join = append(p.Join, d.Path)
			}
		case d.Label != "":
			if d.Match {
				p.Notes = append(p.Notes, fmt.Sprintf("%s: an LVM PV volumed did not make (UUID %s): never touched", d.Path, d.Label))
			}
		case !d.Match:
		case d.Blank:
			p.PVCreate = append(p.PVCreate, d)
			p.Join = append(p.Join, d.Path)
		default:
			p.Notes = append(p.Notes, fmt.Sprintf("%s: not blank (%s): never touched", d.Path, cmp.Or(d.NotBlank, "unknown")))
		}
	}
	p.Devices = append(slices.Clone(p.members), p.Join...)
	return p
}

func pvOf(d Disk, pvs []PV) (PV, bool) {
	i := slices.IndexFunc(pvs, func(pv PV) bool {
		return strings.ReplaceAll(pv.UUID, "-", "") == strings.ReplaceAll(d.Label, "-", "")
	})
	if i < 0 {
		return PV{}, false
	}
	return pvs[i], true
}

package lvm

import (
	"reflect"
	"strings"
	"testing"
)

func TestPlanGroup(t *testing.T) {
	w := GroupWant{VG: "vg0", Grow: true}
	ours := func(id string) string { return PVUUID("vg0", id) }
	blankB := Disk{Path: "/dev/vdb", Identity: "device:serial:B", Match: true, Blank: true}
	blankC := Disk{Path: "/dev/vdc", Identity: "device:serial:C", Match: true, Blank: true}
	data := Disk{Path: "/dev/vdd", Identity: "device:serial:D", Match: true, NotBlank: "UnknownData"}
	foreignPV := Disk{Path: "/dev/vde", Identity: "device:serial:E", Match: true, Label: "aaaaaa-bbbb-cccc-dddd-eeee-ffff-gggggg"}
	notPicked := Disk{Path: "/dev/vdf", Identity: "device:serial:F", Blank: true}
	pvB := Disk{Path: "/dev/vdb", Identity: "device:serial:B", Match: true, Label: ours("device:serial:B")}
	pvC := Disk{Path: "/dev/vdc", Identity: "device:serial:C", Label: ours("device:serial:C")}
	mine := Group{Name: "vg0", Tags: []string{"volumed:vg0"}}
	tests := []struct {
		name     string
		w        GroupWant
		groups   []Group
		disks    []Disk
		pvs      []PV
		action   GroupAction
		pvcreate []string
		join     []string
		devices  []string
		why      string
	}{
		{name: "two blank disks: both made PVs, the VG over them", w: w, disks: []Disk{blankB, blankC, notPicked},
			action: GroupCreate, pvcreate: []string{"/dev/vdb", "/dev/vdc"}, join: []string{"/dev/vdb", "/dev/vdc"}, devices: []string{"/dev/vdb", "/dev/vdc"}},
		{name: "data and a foreign PV are never touched", w: w, disks: []Disk{data, foreignPV, blankC},
			action: GroupCreate, pvcreate: []string{"/dev/vdc"}, join: []string{"/dev/vdc"}, devices: []string{"/dev/vdc"}},
		{name: "nothing blank: wait, naming each disk left alone", w: w, disks: []Disk{data, foreignPV, notPicked},
			action: GroupWait, why: "/dev/vdd: not blank (UnknownData)"},
		{name: "a crash after the first pvcreate: that PV is joined, not made again", w: w, disks: []Disk{pvB, blankC},
			pvs: []PV{{Name: "/dev/vdb", UUID: ours("device:serial:B")}}, action: GroupCreate,
			pvcreate: []string{"/dev/vdc"}, join: []string{"/dev/vdb", "/dev/vdc"}, devices: []string{"/dev/vdb", "/dev/vdc"}},
		{name: "a crash after both pvcreates: vgcreate only", w: w, disks: []Disk{pvB, pvC},
			pvs:    []PV{{Name: "/dev/vdb", UUID: ours("device:serial:B")}, {Name: "/dev/vdc", UUID: ours("device:serial:C")}},
			action: GroupCreate, join: []string{"/dev/vdb", "/dev/vdc"}, devices: []string{"/dev/vdb", "/dev/vdc"}},
		{name: "ours, nothing new: use, the filter is its PVs (matching or not)", w: w, groups: []Group{mine}, disks: []Disk{pvB, pvC, notPicked},
			pvs:    []PV{{Name: "/dev/vdb", UUID: ours("device:serial:B"), VG: "vg0"}, {Name: "/dev/vdc", UUID: ours("device:serial:C"), VG: "vg0"}},
			action: GroupUse, devices: []string{"/dev/vdb", "/dev/vdc"}},
		{name: "grow: a new blank disk extends the VG", w: w, groups: []Group{mine}, disks: []Disk{pvB, blankC},
			pvs:    []PV{{Name: "/dev/vdb", UUID: ours("device:serial:B"), VG: "vg0"}},
			action: GroupExtend, pvcreate: []string{"/dev/vdc"}, join: []string{"/dev/vdc"}, devices: []string{"/dev/vdb", "/dev/vdc"}},
		{name: "grow cut short after pvcreate: vgextend only", w: w, groups: []Group{mine}, disks: []Disk{pvB, pvC},
			pvs:    []PV{{Name: "/dev/vdb", UUID: ours("device:serial:B"), VG: "vg0"}, {Name: "/dev/vdc", UUID: ours("device:serial:C")}},
			action: GroupExtend, join: []string{"/dev/vdc"}, devices: []string{"/dev/vdb", "/dev/vdc"}},
		{name: "no grow: a new blank disk is left", w: GroupWant{VG: "vg0"}, groups: []Group{mine}, disks: []Disk{pvB, blankC},
			pvs:    []PV{{Name: "/dev/vdb", UUID: ours("device:serial:B"), VG: "vg0"}},
			action: GroupUse, devices: []string{"/dev/vdb"}},
		{name: "a VG of the name volumed did not make: adopted, nothing made", w: w, groups: []Group{{Name: "vg0"}}, disks: []Disk{blankB},
			action: GroupAdopt, why: "adopted read-only"},
		{name: "the name's tag on another's VG is not enough: a volumed: tag for another name", w: w, groups: []Group{{Name: "vg0", Tags: []string{"volumed:vg1"}}},
			disks: []Disk{blankB}, action: GroupAdopt, why: "no tag volumed:vg0"},
		{name: "two VGs of the name: refused", w: w, groups: []Group{mine, {Name: "vg0"}}, disks: []Disk{blankB},
			action: GroupRefuse, why: "2 volume groups are named vg0"},
		{name: "a PV made for another VG name is not ours", w: GroupWant{VG: "vg1"}, disks: []Disk{pvB},
			action: GroupWait, why: "an LVM PV volumed did not make"},
		{name: "our PV moved into another VG by hand: left alone", w: w, groups: []Group{mine}, disks: []Disk{pvB},
			pvs:    []PV{{Name: "/dev/vdb", UUID: ours("device:serial:B"), VG: "other"}},
			action: GroupUse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := PlanGroup(tc.w, tc.groups, tc.disks, tc.pvs)
			var pvc []string
			for _, d := range s.PVCreate {
				pvc = append(pvc, d.Path)
			}
			if s.Action != tc.action || !reflect.DeepEqual(pvc, tc.pvcreate) || !reflect.DeepEqual(s.Join, tc.join) || !reflect.DeepEqual(s.Devices, tc.devices) {
				t.Errorf("PlanGroup = %s pvcreate %q join %q devices %q (%s; notes %q)\nwant %s pvcreate %q join %q devices %q",
					s.Action, pvc, s.Join, s.Devices, s.Why, s.Notes, tc.action, tc.pvcreate, tc.join, tc.devices)
			}
			if !strings.Contains(s.Why+strings.Join(s.Notes, "; "), tc.why) {
				t.Errorf("why %q, notes %q: want %q", s.Why, s.Notes, tc.why)
			}
		})
	}
}

func TestPVUUID(t *testing.T) {
	a, b := PVUUID("vg0", "device:serial:A"), PVUUID("vg0", "device:serial:B")
	if a == b || a != PVUUID("vg0", "device:serial:A") {
		t.Fatalf("PVUUID: %q and %q: want one per disk, the same each time", a, b)
	}
	if len(a) != 38 || strings.Count(a, "-") != 6 {
		t.Errorf("PVUUID %q is not lvm2's 6-4-4-4-4-4-6", a)
	}
	if !OursFor("vg0", a) || !OursFor("vg0", strings.ReplaceAll(a, "-", "")) || OursFor("vg1", a) || OursFor("vg0", "x"+a[1:]) {
		t.Errorf("OursFor over %q", a)
	}
}

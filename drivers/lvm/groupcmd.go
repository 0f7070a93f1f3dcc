package lvm

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/volumed/volumed/internal/crashpoint"
)

// FilterConfig is the --config that limits lvm2 to exactly devices:
// it scans, reads and writes no other disk of the host (the devices
// file, which would add its own list, is off).
func FilterConfig(devices []string) string {
	var pats []string
	for _, d := range devices {
		pats = append(pats, `"a|^`+regexp.QuoteMeta(d)+`$|"`)
	}
	list := "[ " + strings.Join(append(pats, `"r|.*|"`), ", ") + " ]"
	return "devices { filter = " + list + " global_filter = " + list + " use_devicesfile = 0 }"
}

// checkDevice refuses a device name the filter could not hold as a
// literal (lvm2's config strings have no escapes for these).
func checkDevice(d string) error {
	if !strings.HasPrefix(d, "/dev/") || strings.ContainsAny(d, "|\"\\\n") {
		return fmt.Errorf("device %q cannot be named in an lvm2 filter", d)
	}
	return nil
}

// Filtered is a command run with a filter of exactly devices: the
// subcommand first, then --config, then the rest.
func Filtered(devices []string, args ...string) []string {
	return append([]string{args[0], "--config", FilterConfig(devices)}, args[1:]...)
}

// GroupsArgs lists every VG with its tags: the one read of the whole
// host, so that no VG is made under a name another VG already has. It
// is VGs' report (vgFields hold the tags): one vgs answers both.
func GroupsArgs() []string { return VGsArgs() }

// PVsArgs lists the PVs on devices (and nothing else).
func PVsArgs(devices []string) []string {
	return Filtered(devices, "pvs", "--reportformat", "json", "-o", "pv_name,pv_uuid,vg_name")
}

// PVCreateArgs makes a PV with volumed's UUID for the VG. No --yes: were
// a signature there after all, lvm2 asks, reads no answer, and makes
// nothing.
func PVCreateArgs(devices []string, vg string, d Disk) []string {
	return Filtered(devices, "pvcreate", "--uuid", PVUUID(vg, d.Identity), "--norestorefile", d.Path)
}

// VGCreateArgs makes the VG over join, tagged, not autoactivated: the
// host's event activation leaves it to volumed, which activates the LVs
// it keeps (docs/lvm.md says why).
func VGCreateArgs(devices []string, w GroupWant, join []string) []string {
	args := []string{"vgcreate", "--addtag", GroupTag(w.VG), "--setautoactivation", "n"}
	if w.ExtentSize > 0 {
		args = append(args, "--physicalextentsize", strconv.FormatInt(w.ExtentSize/1024, 10)+"k")
	}
	return Filtered(devices, append(append(args, w.VG), join...)...)
}

// VGExtendArgs adds join to the VG.
func VGExtendArgs(devices []string, vg string, join []string) []string {
	return Filtered(devices, append([]string{"vgextend", vg}, join...)...)
}

// Groups lists the host's VGs with their tags.
func (t Tool) Groups(ctx context.Context) ([]Group, error) {
	out, err := t.run(ctx, "list volume groups", GroupsArgs())
	if err != nil {
		return nil, err
	}
	return ParseGroups(out)
}

// PVs lists the PVs on devices; none are asked for when there are none.
func (t Tool) PVs(ctx context.Context, devices []string) ([]PV, error) {
	if len(devices) == 0 {
		return nil, nil
	}
	for _, d := range devices {
		if err := checkDevice(d); err != nil {
			return nil, err
		}
	}
	out, err := t.run(ctx, "list physical volumes", PVsArgs(devices))
	if err != nil {
		return nil, err
	}
	return ParsePVs(out)
}

// ApplyGroup does what s says for w: a PV on each blank disk, then the
// VG made or extended. Each command is a step a crash can cut short;
// the next PlanGroup finds the PVs made by their UUID and goes on.
func (t Tool) ApplyGroup(ctx context.Context, w GroupWant, s GroupStep) error {
	if s.Action != GroupCreate && s.Action != GroupExtend {
		return nil
	}
	for _, d := range s.Devices {
		if err := checkDevice(d); err != nil {
			return err
		}
	}
	for _, d := range s.PVCreate {
		crashpoint.Hit("pvcreate", "after-intent")
		if _, err := t.run(ctx, "make a PV on "+d.Path, PVCreateArgs(s.Devices, w.VG, d)); err != nil {
			return err
		}
		crashpoint.Hit("pvcreate", "after-kernel")
	}
	op, args := "vgcreate", VGCreateArgs(s.Devices, w, s.Join)
	if s.Action == GroupExtend {
		op, args = "vgextend", VGExtendArgs(s.Devices, w.VG, s.Join)
	}
	crashpoint.Hit(op, "after-intent")
	if _, err := t.run(ctx, op+" "+w.VG+" with "+strings.Join(s.Join, ", "), args); err != nil {
		return err
	}
	crashpoint.Hit(op, "after-kernel")
	return nil
}

// ParseGroups reads GroupsArgs' report.
func ParseGroups(data []byte) ([]Group, error) {
	rs, err := rows(data, "vg")
	if err != nil {
		return nil, err
	}
	out := make([]Group, 0, len(rs))
	for _, r := range rs {
		if r["vg_name"] == "" {
			return nil, fmt.Errorf("vgs report: a row lacks vg_name: %v", r)
		}
		out = append(out, Group{Name: r["vg_name"], UUID: r["vg_uuid"], Tags: splitTags(r["vg_tags"])})
	}
	return out, nil
}

// ParsePVs reads PVsArgs' report.
func ParsePVs(data []byte) ([]PV, error) {
	rs, err := rows(data, "pv")
	if err != nil {
		return nil, err
	}
	out := make([]PV, 0, len(rs))
	for _, r := range rs {
		if r["pv_name"] == "" || r["pv_uuid"] == "" {
			return nil, fmt.Errorf("pvs report: a row lacks pv_name or pv_uuid: %v", r)
		}
		out = append(out, PV{Name: r["pv_name"], UUID: r["pv_uuid"], VG: r["vg_name"]})
	}
	return out, nil
}

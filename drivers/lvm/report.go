// Package lvm keeps logical volumes, and the volume groups and thin
// pools volumed makes from blank disks (PlanGroup, PlanPool), through
// lvm2's command-line tools (no Go library of lvm2 is kept
// up: the tools and their JSON reports are lvm2's stable interface).
// Every program runs with an argument vector, never a shell.
//
// An LV volumed creates carries the tag volumed:<volume>; that tag, the
// VG's name and the LV's UUID are how it is found again, never its name
// alone. Decide is the pure decision over what a VG holds; Tool runs the
// commands. Nothing here shrinks or renames an LV, or changes one
// volumed did not create; the only removals are of the LVs the CSI
// controller provisioned or snapshotted (Remove, by their tag).
package lvm

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// LV is one logical volume as `lvs` reports it.
type LV struct {
	VG, Name, UUID string
	Tags           []string
	Size           int64 // bytes
	Segtype        string
	Active         bool
	// Open: the LV's device is open (mounted, or held by something).
	Open bool
	// Major and Minor are the kernel's device numbers while it is
	// active (-1 when inactive).
	Major, Minor int
	// Pool is a thin LV's thin pool ("" for other LVs).
	Pool string
	// Data and Metadata are a thin pool's use, in percent, while it is
	// active (-1 when lvm2 does not say: inactive, not a pool).
	Data, Metadata float64
}

// Ref names the LV for the tools: VG/NAME.
func (l LV) Ref() string { return l.VG + "/" + l.Name }

// VG is one volume group as `vgs` reports it.
type VG struct {
	Name, UUID string
	Size, Free int64 // bytes
	ExtentSize int64
	// MissingPVs: PVs of the VG lvm2 cannot find (a disk gone).
	MissingPVs int
	// PVs: how many PVs the VG has, found or missing (-1: a report
	// without the column).
	PVs int
}

// lvFields and vgFields are the report columns asked for; the parsers
// read exactly these (lvm2 2.03 names).
var (
	lvFields = []string{"lv_name", "lv_uuid", "lv_tags", "lv_size", "lv_active", "lv_device_open",
		"lv_kernel_major", "lv_kernel_minor", "segtype", "vg_name", "pool_lv", "data_percent", "metadata_percent"}
	vgFields = []string{"vg_name", "vg_uuid", "vg_size", "vg_free", "vg_extent_size", "vg_missing_pv_count", "pv_count", "vg_tags"}
)

// report is lvm2's `--reportformat json`: one object per report, each
// holding its rows under the report's name ("lv", "vg").
type report struct {
	Report []map[string][]map[string]string `json:"report"`
}

func rows(data []byte, name string) ([]map[string]string, error) {
	var r report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("read the %ss report: %w", name, err)
	}
	var out []map[string]string
	for _, rep := range r.Report {
		out = append(out, rep[name]...)
	}
	return out, nil
}

// ParseLVs reads `lvs --reportformat json --units b --nosuffix --binary`
// with lvFields.
func ParseLVs(data []byte) ([]LV, error) {
	rs, err := rows(data, "lv")
	if err != nil {
		return nil, err
	}
	out := make([]LV, 0, len(rs))
	for _, r := range rs {
		// segtype is a segment's field: lvs gives an LV of several
		// segments (across two PVs, extended) one row per segment.
		if slices.ContainsFunc(out, func(lv LV) bool { return lv.UUID == r["lv_uuid"] }) {
			continue
		}
		lv := LV{VG: r["vg_name"], Name: r["lv_name"], UUID: r["lv_uuid"], Segtype: r["segtype"], Pool: r["pool_lv"],
			Active: r["lv_active"] != "", Open: r["lv_device_open"] == "1", Tags: splitTags(r["lv_tags"])}
		var errs []error
		lv.Size, errs = number(r, "lv_size", errs)
		lv.Data, errs = percent(r, "data_percent", errs)
		lv.Metadata, errs = percent(r, "metadata_percent", errs)
		major, errs := number(r, "lv_kernel_major", errs)
		minor, errs := number(r, "lv_kernel_minor", errs)
		if len(errs) > 0 {
			return nil, fmt.Errorf("LV %q in the lvs report: %w", lv.Name, errs[0])
		}
		if lv.Name == "" || lv.UUID == "" || lv.VG == "" {
			return nil, fmt.Errorf("lvs report: a row lacks lv_name, lv_uuid or vg_name: %v", r)
		}
		lv.Major, lv.Minor = int(major), int(minor)
		if lv.Major < 0 || lv.Minor < 0 {
			lv.Active = false // no device: whatever lv_active says, nothing can be opened
		}
		out = append(out, lv)
	}
	return out, nil
}

// ParseVGs reads `vgs --reportformat json --units b --nosuffix` with
// vgFields.
func ParseVGs(data []byte) ([]VG, error) {
	rs, err := rows(data, "vg")
	if err != nil {
		return nil, err
	}
	out := make([]VG, 0, len(rs))
	for _, r := range rs {
		vg, err := vgOfRow(r, "vgs")
		if err != nil {
			return nil, err
		}
		out = append(out, vg)
	}
	return out, nil
}

// vgOfRow reads vgFields from a row of report (vgs, or an lvs asked
// for its LVs' VGs too).
func vgOfRow(r map[string]string, report string) (VG, error) {
	vg := VG{Name: r["vg_name"], UUID: r["vg_uuid"], PVs: -1}
	var errs []error
	vg.Size, errs = number(r, "vg_size", errs)
	vg.Free, errs = number(r, "vg_free", errs)
	vg.ExtentSize, errs = number(r, "vg_extent_size", errs)
	if _, ok := r["vg_missing_pv_count"]; ok {
		var n int64
		n, errs = number(r, "vg_missing_pv_count", errs)
		vg.MissingPVs = int(n)
	}
	if _, ok := r["pv_count"]; ok {
		var n int64
		n, errs = number(r, "pv_count", errs)
		vg.PVs = int(n)
	}
	if len(errs) > 0 {
		return VG{}, fmt.Errorf("VG %q in the %s report: %w", vg.Name, report, errs[0])
	}
	if vg.Name == "" {
		return VG{}, fmt.Errorf("%s report: a row lacks vg_name: %v", report, r)
	}
	return vg, nil
}

func number(r map[string]string, field string, errs []error) (int64, []error) {
	n, err := strconv.ParseInt(r[field], 10, 64)
	if err != nil {
		return 0, append(errs, fmt.Errorf("%s %q is not a number", field, r[field]))
	}
	return n, errs
}

// percent reads a percentage lvm2 reports as "12.50", or leaves it
// blank where it has none (an LV that is no pool, an inactive pool): -1.
// A report without the column (captured before it was asked) reads -1.
func percent(r map[string]string, field string, errs []error) (float64, []error) {
	v := r[field]
	if v == "" {
		return -1, errs
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 100 {
		return 0, append(errs, fmt.Errorf("%s %q is not a percentage", field, v))
	}
	return f, errs
}

// splitTags reads lv_tags: lvm2 joins them with commas, which a tag
// cannot hold.
func splitTags(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

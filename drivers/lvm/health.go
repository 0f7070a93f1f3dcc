package lvm

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// FullPercent is the use of a thin pool's data or metadata past which
// its thin LVs are reported: a full pool turns their writes into I/O
// errors (or queues them, with the pool's error_if_no_space off), and
// lvm2's own autoextend, when set up, acts at its threshold (70-80% by
// the examples), so 90% means it did not or cannot.
const FullPercent = 90

// Source is an LV with what it stands on: its VG, and its thin pool when
// it is a thin LV.
type Source struct {
	LV   LV
	VG   VG
	Pool *LV
}

// Health says what is wrong with s, each a sentence; none when nothing
// is. Only what puts the LV's data at risk is said: a thin pool past
// FullPercent, a VG missing PVs.
func Health(s Source) []string {
	var out []string
	if p := s.Pool; p != nil {
		for _, u := range []struct {
			what, flag string
			pct        float64
		}{{"data", "--size", p.Data}, {"metadata", "--poolmetadatasize", p.Metadata}} {
			if u.pct >= FullPercent {
				out = append(out, fmt.Sprintf("thin pool %s is %.1f%% full (%s): at 100%% writes to LV %s fail; extend it (lvextend %s +SIZE %s) or free space in it (fstrim)",
					p.Ref(), u.pct, u.what, s.LV.Ref(), u.flag, p.Ref()))
			}
		}
	}
	if n := s.VG.MissingPVs; n > 0 {
		out = append(out, fmt.Sprintf("volume group %s is missing %d physical volume(s): LV %s may be incomplete or degraded; bring the disk back, or vgreduce --removemissing after a raid1 leg is gone", s.VG.Name, n, s.LV.Ref()))
	}
	return out
}

// Detail is s for a status line: "LV vg0/data in VG vg0, thin in pool
// vg0/pool".
func Detail(s Source) string {
	var b strings.Builder
	fmt.Fprintf(&b, "LV %s in VG %s", s.LV.Ref(), s.VG.Name)
	if s.LV.Segtype != "" {
		fmt.Fprintf(&b, ", %s", s.LV.Segtype)
	}
	if s.Pool != nil {
		fmt.Fprintf(&b, " in pool %s", s.Pool.Ref())
	}
	return b.String()
}

// Find reads the LV of VG vg with UUID uuid, its VG and its thin pool:
// one report (lvs of every VG, with each LV's VG's fields), as it runs at
// every resync's health check of each LV; found is false when either
// is gone.
func (t Tool) Find(ctx context.Context, vg, uuid string) (s Source, found bool, err error) {
	out, err := t.run(ctx, "list the LVs of every volume group", AllLVsArgs())
	if err != nil {
		return s, false, err
	}
	lvs, err := ParseLVs(out)
	if err != nil {
		return s, false, err
	}
	rs, err := rows(out, "lv")
	if err != nil {
		return s, false, err
	}
	i := slices.IndexFunc(rs, func(r map[string]string) bool { return r["vg_name"] == vg && r["lv_uuid"] == uuid })
	if i < 0 {
		return s, false, nil
	}
	if s.VG, err = vgOfRow(rs[i], "lvs"); err != nil {
		return s, false, err
	}
	j := slices.IndexFunc(lvs, func(lv LV) bool { return lv.VG == vg && lv.UUID == uuid })
	if j < 0 {
		return s, false, nil
	}
	s.LV = lvs[j]
	for i := range lvs {
		if lvs[i].VG == vg && s.LV.Pool != "" && lvs[i].Name == s.LV.Pool {
			s.Pool = &lvs[i]
		}
	}
	return s, true, nil
}

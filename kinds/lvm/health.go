package lvm

import (
	"context"
	"strings"

	"github.com/volumed/volumed/agent"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/store"
)

// Metric names follow TopoLVM's (topolvm_volumegroup_size_bytes,
// topolvm_thinpool_data_percent, ...), under volumed_lvm_, labelled by
// the VG and the pool instead of a device class.
const (
	metricVGSize     = "volumed_lvm_volumegroup_size_bytes"
	metricVGFree     = "volumed_lvm_volumegroup_available_bytes"
	metricVGMissing  = "volumed_lvm_volumegroup_missing_physical_volumes"
	metricPoolSize   = "volumed_lvm_thinpool_size_bytes"
	metricPoolData   = "volumed_lvm_thinpool_data_percent"
	metricPoolMeta   = "volumed_lvm_thinpool_metadata_percent"
	labelVG, labelTP = "volume_group", "thin_pool"
)

// Health reads the volume's LV, its VG and its thin pool (vgs and lvs,
// at the resync's health check: a scrape reads what it left) and says
// what puts the LV's data at risk (lvmdrv.Health), what it is, and the
// VG's and pool's gauges.
func (a attacher) Health(ctx context.Context, d *agent.Desired, at store.Attachment) (agent.SourceHealth, error) {
	vg, uuid, err := ParseIdentity(at.Identity)
	if err != nil {
		return agent.SourceHealth{}, err
	}
	s, found, err := a.tool.Find(ctx, vg, uuid)
	if err != nil || !found {
		// Gone: Verify and the attach say so; nothing to measure here.
		return agent.SourceHealth{}, err
	}
	h := agent.SourceHealth{Detail: lvmdrv.Detail(s), Gauges: gauges(s)}
	// The attach's note is not kept across a restart, which finds the
	// LV in place and attaches nothing: the status says it each check.
	if d != nil {
		note, err := a.adoptedNote(ctx, d)
		if err != nil {
			return agent.SourceHealth{}, err
		}
		if note != "" {
			h.Detail += ", in a volume group adopted read-only (no tag " + lvmdrv.GroupTag(vg) + ")"
		}
	}
	if why := lvmdrv.Health(s); len(why) > 0 {
		reason := "ThinPoolFull"
		if s.VG.MissingPVs > 0 {
			reason = "PhysicalVolumeMissing"
		}
		h.Problem = &agent.Problem{Reason: reason, Message: strings.Join(why, "; ")}
	}
	return h, nil
}

func gauges(s lvmdrv.Source) []agent.Gauge {
	vgl := [][2]string{{labelVG, s.VG.Name}}
	out := []agent.Gauge{
		{Name: metricVGSize, Help: "Size of an LVM volume group that holds a volume.", Labels: vgl, Value: float64(s.VG.Size)},
		{Name: metricVGFree, Help: "Free bytes in an LVM volume group that holds a volume.", Labels: vgl, Value: float64(s.VG.Free)},
		{Name: metricVGMissing, Help: "Physical volumes lvm2 cannot find in a volume group that holds a volume.", Labels: vgl, Value: float64(s.VG.MissingPVs)},
	}
	p := s.Pool
	if p == nil {
		return out
	}
	pl := [][2]string{{labelVG, s.VG.Name}, {labelTP, p.Name}}
	out = append(out, agent.Gauge{Name: metricPoolSize, Help: "Size of an LVM thin pool's data that a volume is in.", Labels: pl, Value: float64(p.Size)})
	if p.Data >= 0 && p.Metadata >= 0 {
		out = append(out,
			agent.Gauge{Name: metricPoolData, Help: "Percent of an LVM thin pool's data space in use.", Labels: pl, Value: p.Data},
			agent.Gauge{Name: metricPoolMeta, Help: "Percent of an LVM thin pool's metadata space in use.", Labels: pl, Value: p.Metadata})
	}
	return out
}

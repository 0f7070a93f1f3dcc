package lvm

import (
	"context"
	"fmt"
	"strings"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	devicedrv "github.com/volumed/volumed/drivers/device"
	diskdrv "github.com/volumed/volumed/drivers/disk"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/internal/size"
	"github.com/volumed/volumed/kinds/disk"
	"github.com/volumed/volumed/kinds/kind"
)

// CreateGroup is `source.lvm.createVolumeGroup`: volumed makes the
// volume group when it is missing, from the whole blank disks the
// selector picks, and keeps it (docs/lvm.md).
type CreateGroup struct {
	// Disks is a CEL expression over `disk` (as `source.disk.match`):
	// every blank disk it picks is made a PV of the VG. A disk holding
	// anything (a signature, partitions, a holder, data) is never
	// touched.
	Disks string `yaml:"disks" json:"disks"`
	// ExtentSize is the VG's physical extent size (a power of two, at
	// least 1Ki); lvm2's default (4Mi) when empty.
	ExtentSize string `yaml:"extentSize,omitempty" json:"extentSize,omitempty"`
	// Grow: a blank disk the selector picks later is added to the VG
	// (vgextend). No PV is ever removed.
	Grow bool `yaml:"grow,omitempty" json:"grow,omitempty"`
	// ThinPools volumed makes in the VG when missing (tagged
	// volumed-pool:<name>); a thin LV names one in thinPool.
	ThinPools []ThinPool `yaml:"thinPools,omitempty" json:"thinPools,omitempty"`

	extent int64
}

// ThinPool is a thin pool of a VG volumed makes. Never resized or removed.
type ThinPool struct {
	Name string `yaml:"name" json:"name"`
	// Size of the pool's data (e.g. 100Gi).
	Size string `yaml:"size" json:"size"`
	// MetadataSize of its metadata LV; lvm2's choice when empty.
	MetadataSize string `yaml:"metadataSize,omitempty" json:"metadataSize,omitempty"`
}

// checkGroup checks createVolumeGroup and returns its claim: the disks
// of one VG are declared by one volume; the others name the VG.
func checkGroup(s *Source, c *manifest.Check) []manifest.Claim {
	g := s.CreateVolumeGroup
	if g == nil {
		return nil
	}
	disk.CheckMatch(c, "createVolumeGroup.disks", g.Disks)
	if g.ExtentSize != "" {
		g.extent = c.Size("createVolumeGroup.extentSize", g.ExtentSize)
		if g.extent > 0 && (g.extent < 1024 || g.extent&(g.extent-1) != 0) {
			c.Report("createVolumeGroup.extentSize", fmt.Sprintf("%s is not a power of two of at least 1Ki, as lvm2 asks of an extent", g.ExtentSize))
		}
	}
	checkPools(g.ThinPools, c)
	return []manifest.Claim{{Key: "lvm volume group " + s.VolumeGroup, Field: "createVolumeGroup",
		What: "the disks of volume group " + s.VolumeGroup + " (one volume declares them; the others name the VG)"}}
}

func checkPools(pools []ThinPool, c *manifest.Check) {
	seen := map[string]bool{}
	for i, p := range pools {
		f := fmt.Sprintf("createVolumeGroup.thinPools[%d].", i)
		switch why := lvmdrv.CheckLVName(p.Name); {
		case p.Name == "":
			c.Report(f+"name", "required: the thin pool's LV name")
		case why != "":
			c.Report(f+"name", why)
		case seen[p.Name]:
			c.Report(f+"name", "thin pool "+p.Name+" is listed twice")
		}
		seen[p.Name] = true
		if p.Size == "" {
			c.Report(f+"size", "required: the size of the pool's data, e.g. 100Gi")
		} else {
			c.Size(f+"size", p.Size)
		}
		if p.MetadataSize != "" {
			c.Size(f+"metadataSize", p.MetadataSize)
		}
	}
}

// poolWants are the thin pools a spec asks for.
func poolWants(s *Source) ([]lvmdrv.PoolWant, error) {
	var out []lvmdrv.PoolWant
	for _, p := range s.CreateVolumeGroup.ThinPools {
		w := lvmdrv.PoolWant{VG: s.VolumeGroup, Name: p.Name}
		var err error
		if w.Size, err = size.Parse(p.Size); err != nil {
			return nil, fmt.Errorf("thin pool %s size: %w", p.Name, err)
		}
		if p.MetadataSize != "" {
			if w.MetadataSize, err = size.Parse(p.MetadataSize); err != nil {
				return nil, fmt.Errorf("thin pool %s metadataSize: %w", p.Name, err)
			}
		}
		out = append(out, w)
	}
	return out, nil
}

// groupWant is the VG a spec asks volumed to keep; a volume rebuilt
// from an intent has the extent size as written.
func groupWant(s *Source) (lvmdrv.GroupWant, error) {
	g := s.CreateVolumeGroup
	w := lvmdrv.GroupWant{VG: s.VolumeGroup, ExtentSize: g.extent, Grow: g.Grow}
	if w.ExtentSize == 0 && g.ExtentSize != "" {
		var err error
		if w.ExtentSize, err = size.Parse(g.ExtentSize); err != nil {
			return w, fmt.Errorf("lvm createVolumeGroup.extentSize: %w", err)
		}
	}
	return w, nil
}

// groupKeeper makes and grows the VGs volumed keeps.
type groupKeeper struct {
	tool  lvmdrv.Tool
	disks diskdrv.Lister
}

// read gathers PlanGroup's facts: the host's VGs (one unfiltered
// report), its disks with the selector's verdict and the blank rule's,
// the LVM2 label on each, and lvm2's PVs on the disks whose label is
// volumed's for this VG only: no other disk is scanned by lvm2.
func (k groupKeeper) read(ctx context.Context, s *Source) ([]lvmdrv.Group, []lvmdrv.Disk, []lvmdrv.PV, error) {
	groups, err := k.tool.Groups(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	sel, err := diskdrv.Compile(s.CreateVolumeGroup.Disks)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("createVolumeGroup.disks %q: %w", s.CreateVolumeGroup.Disks, err)
	}
	facts, err := k.disks.List(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list disks: %w", err)
	}
	var disks []lvmdrv.Disk
	var labelled []string
	for _, f := range facts {
		match, _, err := sel.Match(f)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("disk %s: %w", f.Path, err)
		}
		d := lvmdrv.Disk{Path: f.Path, Identity: devicedrv.Identity(f.Selector()), Match: match, Blank: f.Blank, NotBlank: f.NotBlank}
		if f.ProbeError == "" {
			if d.Label, err = lvmdrv.ReadLabel(f.Path); err != nil {
				return nil, nil, nil, err
			}
		}
		if lvmdrv.OursFor(s.VolumeGroup, d.Label) {
			labelled = append(labelled, f.Path)
		}
		disks = append(disks, d)
	}
	pvs, err := k.tool.PVs(ctx, labelled)
	return groups, disks, pvs, err
}

// joinable: a disk is there that PlanGroup would add to the VG.
func (k groupKeeper) joinable(ctx context.Context, s *Source) (bool, error) {
	w, err := groupWant(s)
	if err != nil {
		return false, err
	}
	groups, disks, pvs, err := k.read(ctx, s)
	if err != nil {
		return false, fmt.Errorf("volume group %s: %w", w.VG, err)
	}
	return lvmdrv.PlanGroup(w, groups, disks, pvs).Action == lvmdrv.GroupExtend, nil
}

// Ensure brings the VG s names to what createVolumeGroup asks, and
// returns the tool to use in it: filtered to exactly its devices when it
// is volumed's, and whether it is adopted (read-only). Each pvcreate,
// vgcreate and vgextend runs under the volume's attach intent; a crash
// in between is resumed by the next pass (PlanGroup).
func (k groupKeeper) Ensure(ctx context.Context, volume string, s *Source) (tool lvmdrv.Tool, adopted bool, note string, err error) {
	w, err := groupWant(s)
	if err != nil {
		return k.tool, false, "", err
	}
	for range 2 { // the second pass is the check of the first's work
		groups, disks, pvs, err := k.read(ctx, s)
		if err != nil {
			return k.tool, false, "", fmt.Errorf("volume %s, volume group %s: %w", volume, w.VG, err)
		}
		step := lvmdrv.PlanGroup(w, groups, disks, pvs)
		note = strings.Join(step.Notes, "; ")
		switch step.Action {
		case lvmdrv.GroupAdopt:
			return k.tool, true, step.Why, nil
		case lvmdrv.GroupWait:
			// For a blank disk the selector picks: one appearing, wiped,
			// or let go by its holder.
			return k.tool, false, "", &agent.Waiting{For: agent.Awaited{AnyDisk: true, Release: true},
				Err: fmt.Errorf("volume %s: %s", volume, step.Why)}
		case lvmdrv.GroupRefuse:
			return k.tool, false, "", fmt.Errorf("volume %s: %s", volume, step.Why)
		case lvmdrv.GroupUse:
			tool := lvmdrv.Tool{Runner: k.tool.Runner, Devices: step.Devices}
			if err := k.pools(ctx, tool, s); err != nil {
				return k.tool, false, "", fmt.Errorf("volume %s: %w", volume, err)
			}
			return tool, false, note, nil
		}
		if err := k.tool.ApplyGroup(ctx, w, step); err != nil {
			return k.tool, false, "", fmt.Errorf("volume %s, volume group %s: %w", volume, w.VG, err)
		}
	}
	return k.tool, false, "", fmt.Errorf("volume %s: volume group %s is not complete after lvm2 said it made it", volume, w.VG)
}

// pools makes the thin pools the VG lacks, each under the volume's
// intent, found again by its tag after a crash (PlanPool).
func (k groupKeeper) pools(ctx context.Context, tool lvmdrv.Tool, s *Source) error {
	wants, err := poolWants(s)
	if err != nil || len(wants) == 0 {
		return err
	}
	lvs, _, err := tool.LVs(ctx, s.VolumeGroup)
	if err != nil {
		return err
	}
	for _, p := range wants {
		switch st := lvmdrv.PlanPool(p, lvs); st.Action {
		case lvmdrv.Refuse:
			return fmt.Errorf("thin pool %s/%s: %s", p.VG, p.Name, st.Why)
		case lvmdrv.Create:
			if err := k.tool.CreatePool(ctx, tool.Devices, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// adoptedNote says, for a volume whose source asks volumed to keep its
// VG, when that VG is one volumed did not make (used read-only).
func (a attacher) adoptedNote(ctx context.Context, d *agent.Desired) (string, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil || s.CreateVolumeGroup == nil {
		return "", err
	}
	groups, err := a.tool.Groups(ctx)
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", d.Name, err)
	}
	return lvmdrv.Adopted(s.VolumeGroup, groups), nil
}

// inGroup makes or grows the volume's VG when its source asks volumed
// to keep it (createVolumeGroup), and returns the attacher to go on
// with: its lvm2 commands filtered to the VG's devices, or w read-only
// in a VG volumed did not create. note says what was left alone.
func (a attacher) inGroup(ctx context.Context, d *agent.Desired, w *lvmdrv.Want) (attacher, string, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil || s.CreateVolumeGroup == nil {
		return a, "", err
	}
	tool, adopted, note, err := groupKeeper{tool: a.tool, disks: a.disks}.Ensure(ctx, d.Name, s)
	if err != nil {
		return a, "", err
	}
	a.tool, w.ReadOnly = tool, adopted
	return a, note, nil
}

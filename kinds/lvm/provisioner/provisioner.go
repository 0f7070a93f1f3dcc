// Package provisioner is the CSI controller's lvm backend's hands on
// lvm2 (agent/csi.LVM over drivers/lvm). It is a package of its own so
// that the lvm kind, which agent/csi's tests load, does not import the
// CSI service.
package provisioner

import (
	"context"

	"github.com/volumed/volumed/agent/csi"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
)

// Provisioner is the CSI controller's lvm backend's hands on lvm2
// (csi.LVM): it reads a VG, takes thin snapshots and removes the LVs the
// controller provisioned, each found by its tag, never by its name alone.
type Provisioner struct {
	Tool lvmdrv.Tool
}

var _ csi.LVM = Provisioner{}

// tag is a provisioned volume's LV's tag, the lvm kind's (lvmdrv.Tag), or
// a CSI snapshot's (volume "").
func tag(volume, name string) string {
	if volume == "" {
		return lvmdrv.SnapTag(name)
	}
	return lvmdrv.Tag(volume)
}

// Group reads vg and its LVs (one vgs, one lvs).
func (p Provisioner) Group(ctx context.Context, vg string) (csi.LVMGroup, error) {
	v, lvs, found, err := p.Tool.Group(ctx, vg)
	if err != nil || !found {
		return csi.LVMGroup{}, err
	}
	g := csi.LVMGroup{Found: true, Free: v.Free}
	for _, lv := range lvs {
		v := csi.LVMVolume{Name: lv.Name, Size: lv.Size, Thin: lv.Segtype == lvmdrv.Thin, ThinPool: lv.Segtype == "thin-pool",
			DataPercent: lv.Data, Open: lv.Open, Owner: lvmdrv.Owner(lv)}
		if lvmdrv.Tagged(lv, lvmdrv.SnapTag(lv.Name)) {
			v.Snapshot = lv.Name
		}
		g.LVs = append(g.LVs, v)
	}
	return g, nil
}

// Snapshot makes name, a thin snapshot of from (lvmdrv.Tool.Snapshot).
func (p Provisioner) Snapshot(ctx context.Context, vg, from, name, volume string) error {
	return p.Tool.Snapshot(ctx, vg, from, name, tag(volume, name))
}

// Remove removes name when it carries its tag (lvmdrv.Tool.Remove).
func (p Provisioner) Remove(ctx context.Context, vg, name, volume string) error {
	return p.Tool.Remove(ctx, vg, name, tag(volume, name))
}

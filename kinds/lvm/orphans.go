package lvm

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/volumed/volumed/agent"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// ListOwned lists every active LV tagged volumed:<volume>, in any VG,
// as the core's start-up pass over the kernel (agent.OrphanLister): a
// recorded LV listed is verified without a report of its own, and one no
// volume claims (a crash between lvcreate and the record, for a volume
// whose manifest is gone) is the core's orphan. Its teardown is the
// teardown of any LV volumed made: deactivated, unless open, and never
// removed (the data is the user's to delete with lvremove). An inactive
// tagged LV is not attached (Verify says the same) and is left as it is.
// With no LV active in the kernel no lvm2 command runs.
func (a attacher) ListOwned(ctx context.Context) ([]store.Attachment, error) {
	if active, err := lvmdrv.AnyActive(a.sysRoot); err != nil || !active {
		return nil, err
	}
	lvs, err := a.tool.Tagged(ctx)
	if err != nil {
		return nil, fmt.Errorf("list LVs tagged %s*: %w", lvmdrv.TagPrefix, err)
	}
	var out []store.Attachment
	for _, lv := range lvs {
		if !lv.Active {
			continue
		}
		dev, err := lvmdrv.Node(a.sysRoot, lv)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Attachment{Kind: Name, Device: dev, Identity: Identity(lv), Owned: true})
	}
	return out, nil
}

// ListLeftovers lists what volumed made in LVM that no manifest in
// wanted names (agent.LeftoverLister, lvmdrv.Leftovers): inactive
// tagged LVs and tagged VGs, left by a manifest removed (its LV
// deactivated at teardown) or a crash. The core logs them at start-up;
// nothing is removed or changed. lvm2 runs only when a disk of the host
// carries an LVM2 label or an LV is active.
func (a attacher) ListLeftovers(ctx context.Context, wanted []*agent.Desired) ([]string, error) {
	active, err := lvmdrv.AnyActive(a.sysRoot)
	if err != nil {
		return nil, err
	}
	if !active && !lvmdrv.AnyPV(a.sysRoot, a.devRoot()) {
		return nil, nil
	}
	volumes, groups := map[string]bool{}, map[string]bool{}
	for _, d := range wanted {
		volumes[d.Name] = true
		if s, err := kind.Spec[Source](d, Name); err == nil && s != nil {
			groups[s.VolumeGroup] = true
		}
	}
	vgs, err := a.tool.Groups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list volume groups: %w", err)
	}
	lvs, err := a.tool.Tagged(ctx)
	if err != nil {
		return nil, fmt.Errorf("list LVs tagged %s*: %w", lvmdrv.TagPrefix, err)
	}
	return lvmdrv.Leftovers(lvs, vgs, volumes, groups), nil
}

// devRoot is where the disks' nodes are: /dev, or the fake sysfs tree's
// dev/ in tests.
func (a attacher) devRoot() string {
	if a.sysRoot == "" {
		return "/dev"
	}
	return filepath.Join(a.sysRoot, "dev")
}

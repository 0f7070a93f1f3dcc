package lvm

import (
	"context"
	"fmt"

	lvmdrv "github.com/volumed/volumed/drivers/lvm"
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

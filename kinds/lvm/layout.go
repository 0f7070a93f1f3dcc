package lvm

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
)

// minStripeSize is lvm2's least stripe size.
const minStripeSize = 4 << 10

// checkLayout: stripes and stripeSize exactly for striped, mirrors
// exactly for raid1. How many PVs the VG has is not a manifest error:
// the attach waits for them (lvmdrv.PVsShort).
func checkLayout(s *Source, c *manifest.Check) {
	striped, raid1 := s.Type == lvmdrv.Striped, s.Type == lvmdrv.Raid1
	switch {
	case striped && s.Stripes == 0:
		c.Report("stripes", "required for type striped: how many PVs the LV is striped over, 2 or more")
	case striped && s.Stripes < 2:
		c.Report("stripes", fmt.Sprintf("must be 2 or more, got %d (an LV on one PV is type linear)", s.Stripes))
	case !striped && s.Stripes != 0:
		c.Report("stripes", "only for type striped, not "+s.Type)
	}
	switch {
	case !striped && s.StripeSize != "":
		c.Report("stripeSize", "only for type striped, not "+s.Type)
	case s.StripeSize != "":
		s.stripeSize = c.Size("stripeSize", s.StripeSize)
		if n := s.stripeSize; n > 0 && (n < minStripeSize || bits.OnesCount64(uint64(n)) != 1) {
			c.Report("stripeSize", fmt.Sprintf("must be a power of two of 4Ki or more (lvm2's), got %s", s.StripeSize))
		}
	}
	switch {
	case s.Mirrors < 0:
		c.Report("mirrors", fmt.Sprintf("must be 1 or more (the copies besides the first; 0 is the default, 1), got %d", s.Mirrors))
	case !raid1 && s.Mirrors != 0:
		c.Report("mirrors", "only for type raid1, not "+s.Type)
	}
}

// layoutKey is the layout's part of the manifest's key.
func layoutKey(s *Source) string {
	switch s.Type {
	case lvmdrv.Striped:
		return fmt.Sprintf(" stripes %d size %s", s.Stripes, s.StripeSize)
	case lvmdrv.Raid1:
		return fmt.Sprintf(" mirrors %d", max(s.Mirrors, 1)) // 0 is 1: the same LV
	}
	return ""
}

// room is a wait (an error saying so) while w's VG has fewer PVs than
// w's stripes or raid1 legs: lvcreate would fail, and a disk may be
// added.
func (a attacher) room(ctx context.Context, w lvmdrv.Want) error {
	vgs, err := a.tool.VGs(ctx)
	if err != nil {
		return fmt.Errorf("volume %s: %w", w.Volume, err)
	}
	for _, vg := range vgs {
		if vg.Name != w.VG {
			continue
		}
		if why := lvmdrv.PVsShort(w, vg); why != "" {
			// For a PV more: a disk appearing (or written, vgextend).
			return &agent.Waiting{For: agent.Awaited{AnyDisk: true}, Err: fmt.Errorf("volume %s: %s", w.Volume, why)}
		}
	}
	return nil
}

// checkSize: exactly one of size, extents and grow; extents is lvm2's
// N%FREE, N%VG or N%PVS, and not for a thin LV (its size is virtual, not
// extents of the VG); grow is for a linear LV only (a striped or raid1
// LV takes its extents on several PVs at once).
func checkSize(s *Source, c *manifest.Check) {
	if s.Grow {
		switch {
		case s.Size != "" || s.Extents != "":
			c.Report("grow", "size or extents set too: an LV that follows its volume group (grow) takes its free extents, it has no size of its own")
		case s.Type != lvmdrv.Linear:
			c.Report("grow", "only for type linear, not "+s.Type+": set size")
		}
		return
	}
	switch {
	case s.Size != "" && s.Extents != "":
		c.Report("extents", "size and extents are both set: the LV is sized by one of them")
	case s.Size != "":
		s.size = c.Size("size", s.Size)
	case s.Extents == "":
		c.Report("size", "required (or extents, or grow): the size of the LV volumed creates when it is missing, e.g. 10Gi")
	case s.Type == lvmdrv.Thin:
		c.Report("extents", "not for type thin: a thin LV's size is virtual; set size")
	default:
		if why := lvmdrv.CheckExtents(s.Extents); why != "" {
			c.Report("extents", why)
		}
	}
}

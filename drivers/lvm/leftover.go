package lvm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/volumed/volumed/internal/sysfs"
)

// Leftovers is what volumed made that no manifest names, for the
// start-up listing (logged, never removed nor changed): an inactive LV
// tagged volumed:<volume> whose volume no manifest names, and a VG
// tagged volumed:<vg> (one volumed made) that no volume names. An active
// tagged LV is not listed: it is an attachment, the core's orphan
// (ListOwned). volumes and groups are the names the manifests use.
func Leftovers(lvs []LV, vgs []Group, volumes, groups map[string]bool) []string {
	var out []string
	for _, lv := range lvs {
		if o := Owner(lv); o != "" && !lv.Active && !volumes[o] {
			out = append(out, fmt.Sprintf("inactive LV %s (uuid %s) tagged %s: no manifest names volume %s", lv.Ref(), lv.UUID, Tag(o), o))
		}
	}
	for _, g := range vgs {
		if slices.Contains(g.Tags, GroupTag(g.Name)) && !groups[g.Name] {
			out = append(out, fmt.Sprintf("volume group %s (uuid %s) tagged %s: no manifest names it", g.Name, g.UUID, GroupTag(g.Name)))
		}
	}
	sort.Strings(out)
	return out
}

// AnyPV says whether a block device of the host (not a loop, dm, ram or
// optical one) carries an LVM2 label, read by volumed itself: a host
// with none has no VG, and the start-up listing runs no lvm2 scan there.
func AnyPV(sysRoot, devRoot string) bool {
	paths, _ := filepath.Glob(filepath.Join(sysfs.RootOr(sysRoot), "class", "block", "*"))
	for _, p := range paths {
		name := filepath.Base(p)
		if slices.ContainsFunc([]string{"loop", "dm-", "ram", "zram", "sr", "nbd"}, func(pre string) bool { return strings.HasPrefix(name, pre) }) {
			continue
		}
		if _, err := os.Stat(filepath.Join(p, "size")); err != nil {
			continue
		}
		if u, err := ReadLabel(filepath.Join(devRoot, name)); err == nil && u != "" {
			return true
		}
	}
	return false
}

package lvm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/volumed/volumed/internal/sysfs"
)

// AnyActive says whether the kernel has an active LV of any VG: a
// device-mapper device whose DM UUID lvm2 made ("LVM-<vg uuid><lv
// uuid>"). It reads sysfs only, so a start on a host with no LV active
// runs no lvm2 scan of every disk (which may be slow, or hang on a
// network disk) to list none.
func AnyActive(sysRoot string) (bool, error) {
	paths, err := filepath.Glob(filepath.Join(sysfs.RootOr(sysRoot), "block", "dm-*", "dm", "uuid"))
	if err != nil {
		return false, err
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue // removed since the glob
		}
		if err != nil {
			return false, fmt.Errorf("read device-mapper UUID: %w", err)
		}
		if strings.HasPrefix(string(b), "LVM-") {
			return true, nil
		}
	}
	return false, nil
}

// GroupOf is the VG of the LV whose device-mapper device has its sysfs
// entry at dir, "" when the device is no LV of lvm2's. lvm2 names the
// device VG-LV with every "-" of either doubled.
func GroupOf(dir string) string {
	if !strings.HasPrefix(sysfs.AttrOr(dir, "dm", "uuid"), "LVM-") {
		return ""
	}
	name := sysfs.AttrOr(dir, "dm", "name")
	for i := 0; i < len(name); i++ {
		if name[i] != '-' {
			continue
		}
		if i+1 < len(name) && name[i+1] == '-' {
			i++
			continue
		}
		return strings.ReplaceAll(name[:i], "--", "-")
	}
	return ""
}

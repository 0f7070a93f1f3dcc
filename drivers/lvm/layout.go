package lvm

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// layoutArgs starts lvcreate's vector for a linear, striped or raid1 LV:
// its type and how it lies on the PVs.
func layoutArgs(w Want) []string {
	args := []string{"lvcreate", "--yes", "--type", cmp.Or(w.Type, Linear)}
	switch w.Type {
	case Striped:
		args = append(args, "--stripes", strconv.Itoa(w.Stripes))
		if w.StripeSize > 0 {
			// In KiB: lvm2 reads a bare number so, on every version.
			args = append(args, "--stripesize", strconv.FormatInt(w.StripeSize/1024, 10)+"k")
		}
	case Raid1:
		args = append(args, "--mirrors", strconv.Itoa(w.mirrors()))
	}
	return args
}

// mirrors is a raid1 LV's copies besides the first: 1 unless asked.
func (w Want) mirrors() int { return cmp.Or(w.Mirrors, 1) }

// PVsNeeded is how many PVs w's LV lies on at least: a stripe or a raid1
// leg each on its own PV (lvm2 never puts two on one disk).
func PVsNeeded(w Want) int {
	switch w.Type {
	case Striped:
		return w.Stripes
	case Raid1:
		return w.mirrors() + 1
	}
	return 1
}

// PVsShort says why vg cannot hold w's LV yet ("" when it can): fewer
// PVs found than its stripes or legs. It is a wait, not a manifest error:
// a disk may be added to the VG (vgextend) or come back.
func PVsShort(w Want, vg VG) string {
	need := PVsNeeded(w)
	if need <= 1 || vg.PVs < 0 {
		return ""
	}
	have := vg.PVs - vg.MissingPVs
	if have >= need {
		return ""
	}
	what := fmt.Sprintf("%d stripes", need)
	if w.Type == Raid1 {
		what = fmt.Sprintf("%d raid1 legs", need)
	}
	return fmt.Sprintf("volume group %s has %d physical volume(s) found, LV %s needs %d, one for each of its %s: add a disk to it (vgextend %s DEVICE)",
		vg.Name, have, w.Ref(), need, what, vg.Name)
}

// Granule is what lvm2 rounds w's size up to in a VG of extent bytes per
// extent: a whole extent on each stripe of a striped LV, a whole extent
// otherwise.
func Granule(w Want, extent int64) int64 {
	if w.Type == Striped && w.Stripes > 1 {
		return extent * int64(w.Stripes)
	}
	return extent
}

// CheckExtents says what is wrong with an extents size, "" when lvm2
// takes it: N%FREE, N%VG or N%PVS with N from 1 to 100. (lvm2 also takes
// a bare count of extents and %ORIGIN; a count depends on the VG's
// extent size, which a manifest does not know, and there is no origin.)
func CheckExtents(e string) string {
	n, base, ok := strings.Cut(e, "%")
	v, err := strconv.Atoi(n)
	switch {
	case !ok || err != nil || !slices.Contains([]string{"FREE", "VG", "PVS"}, base):
		return fmt.Sprintf("%q is not a percentage lvm2 sizes an LV by: N%%FREE, N%%VG or N%%PVS", e)
	case v < 1 || v > 100:
		return fmt.Sprintf("%d%% is not from 1 to 100", v)
	}
	return ""
}

package lvm

// FollowExtents is how an LV that follows its VG is made: every free
// extent of the VG at its creation.
const FollowExtents = "100%FREE"

// FollowSize is the size w's LV, which follows its VG (source.lvm.grow),
// is extended to: its own and every free extent of vg, 0 when there is
// nothing to take or the LV is not one to extend: not following, not
// volumed's (no tag of w's volume: never resized), or no free extent.
// The one rule of a following LV's growth: a VG extended by volumed
// (createVolumeGroup.grow) or by hand gives its new extents to the LV.
func FollowSize(w Want, lv LV, vg VG) int64 {
	if !w.Follow || Owner(lv) != w.Volume || lv.VG != vg.Name || vg.Free <= 0 {
		return 0
	}
	return lv.Size + vg.Free
}

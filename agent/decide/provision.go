package decide

import (
	"fmt"
	"maps"
	"sort"
	"strings"
)

// Promise is one provisioned volume's claim on its pool: the size it was
// created (or expanded) with, and what it already holds of the pool
// (zero before it exists: it is made at first stage). For a loop image
// that is the bytes the image holds; for an LV, its size once made
// (a linear LV's extents are taken from the VG's free space by lvcreate,
// a thin LV's writes from its pool's free data).
type Promise struct {
	Size      int64
	Allocated int64
}

// PoolCapacity is the one rule for what a pool may still promise, for
// every backend: the pool's free space (a loop pool's filesystem, an LVM
// VG's free extents, a thin pool's free data times its overprovision
// ratio: LVMFree), which already excludes what exists, less the reserve,
// less what each provisioned volume may still allocate. A sparse image
// holds little of its size, an LV is not there before its first stage:
// counting only what is allocated would promise the same space twice.
func PoolCapacity(free, reserve int64, promised []Promise) int64 {
	c := free - reserve
	for _, p := range promised {
		if rest := p.Size - p.Allocated; rest > 0 {
			c -= rest
		}
	}
	return max(c, 0)
}

// VolumeRequest is what a CreateVolume call asks, or what a provisioned
// volume's record says it was created with.
type VolumeRequest struct {
	Name string
	// Required and Limit are the capacity range (0: not set).
	Required, Limit int64
	Params          map[string]string
	Block           bool
	// Source is the snapshot ID the volume is restored from ("": none).
	Source string
}

// VolumeSize is the size a request gets: what it requires (def when it
// requires nothing) rounded up to a whole MiB, or unrounded when the
// rounding would pass its limit.
func VolumeSize(required, limit, def int64) (int64, error) {
	const unit = 1 << 20
	switch {
	case required < 0 || limit < 0:
		return 0, fmt.Errorf("capacity range: negative bytes (required %d, limit %d)", required, limit)
	case limit > 0 && required > limit:
		return 0, fmt.Errorf("capacity range: required %d bytes is more than the limit %d", required, limit)
	}
	size := required
	if size == 0 {
		size = def
	}
	if r := (size + unit - 1) / unit * unit; limit == 0 || r <= limit {
		size = r
	}
	if limit > 0 && size > limit {
		size = limit // the default over the limit
	}
	return size, nil
}

// SameVolume is the one rule for a repeated CreateVolume: the volume
// provisioned under the name (its record's request and size) answers a
// new request when the parameters and access type are the same and its
// size fits the new capacity range; otherwise it says why not (the call
// then fails with ALREADY_EXISTS, as the CSI spec asks).
func SameVolume(have VolumeRequest, size int64, want VolumeRequest) string {
	switch {
	case have.Name != want.Name:
		return fmt.Sprintf("the volume was provisioned for the name %q", have.Name)
	case have.Block != want.Block:
		return fmt.Sprintf("the volume was provisioned with block access %v", have.Block)
	case have.Source != want.Source:
		return fmt.Sprintf("the volume was provisioned from %q", have.Source)
	case !maps.Equal(nonEmpty(have.Params), nonEmpty(want.Params)):
		return "the volume was provisioned with other parameters: " + diffKeys(have.Params, want.Params)
	case size < want.Required:
		return fmt.Sprintf("the volume has %d bytes, the request requires %d", size, want.Required)
	case want.Limit > 0 && size > want.Limit:
		return fmt.Sprintf("the volume has %d bytes, over the request's limit %d", size, want.Limit)
	}
	return ""
}

func nonEmpty(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// diffKeys names the parameters whose values differ.
func diffKeys(a, b map[string]string) string {
	var ks []string
	for k := range a {
		if a[k] != b[k] {
			ks = append(ks, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok && b[k] != "" {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// Use is what holds a provisioned volume on this node when its deletion
// is asked for.
type Use struct {
	// Staged: the kubelet's stage record of the volume is kept.
	Staged bool
	// Attached: the agent still has the volume's image attached or
	// mounted (a teardown still running, or failing).
	Attached bool
	// ClaimedBy names another volume (a manifest's) that uses the image.
	ClaimedBy string
	// Open: the kernel has the volume's device open (an LV mounted or
	// held outside volumed, which lvm2 reports).
	Open bool
}

// MayDelete is the one rule for DeleteVolume: the image goes only when
// nothing on the node stages, attaches or claims it; otherwise it says
// why (the call fails with FAILED_PRECONDITION and is retried).
func MayDelete(u Use) string {
	switch {
	case u.Staged:
		return "it is still staged on this node (NodeUnstageVolume first)"
	case u.Attached:
		return "its image is still attached or mounted on this node (the teardown has not finished)"
	case u.ClaimedBy != "":
		return fmt.Sprintf("its image is used by volume %s", u.ClaimedBy)
	case u.Open:
		return "its device is open on this node (mounted or held outside volumed)"
	}
	return ""
}

// Reachable is the one rule for a CreateVolume's accessibility
// requirements: a volume on this node's disks can be made when nothing
// is required, or when one of the requisite topologies names this node
// (segment key: node). The preferred ones only order a choice, and this
// node has none to make.
func Reachable(key, node string, requisite []map[string]string) bool {
	if len(requisite) == 0 {
		return true
	}
	for _, t := range requisite {
		if t[key] == node {
			return true
		}
	}
	return false
}

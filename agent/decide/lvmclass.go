package decide

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// The StorageClass parameters of the lvm backend; the others are the
// volume's manifest fields, as for the loop backend.
const (
	ParamVolumeGroup   = "volumeGroup"
	ParamThinPool      = "thinPool"
	ParamType          = "type"
	ParamOverprovision = "overprovisionRatio"
)

// LVMClass is what an lvm StorageClass asks: the VG, the LV type
// (linear or thin), the thin pool and how far its free space may be
// promised over (a ratio of 1 or more; 1 for linear).
type LVMClass struct {
	VG    string  `json:"volumeGroup"`
	Type  string  `json:"type"`
	Pool  string  `json:"thinPool,omitempty"`
	Ratio float64 `json:"overprovisionRatio"`
}

// LVMParams is the one rule for an lvm class's own parameters: it reads
// them, or says what is wrong naming the parameter. allowed are the VGs
// the host's owner gave the backend (run --csi-lvm-volume-groups): a
// class author is not the host's owner, as for the loop pool.
func LVMParams(params map[string]string, allowed []string) (LVMClass, error) {
	c := LVMClass{VG: params[ParamVolumeGroup], Type: params[ParamType], Pool: params[ParamThinPool], Ratio: 1}
	if c.Type == "" {
		c.Type = "linear"
	}
	switch {
	case c.VG == "":
		return c, fmt.Errorf("parameters.%s: required: the volume group the LVs are made in", ParamVolumeGroup)
	case !slices.Contains(allowed, c.VG):
		return c, fmt.Errorf("parameters.%s: %q is not one of the volume groups this node serves (--csi-lvm-volume-groups: %v)", ParamVolumeGroup, c.VG, allowed)
	case c.Type != "linear" && c.Type != "thin":
		return c, fmt.Errorf("parameters.%s: %q: must be linear or thin", ParamType, c.Type)
	case c.Type == "thin" && c.Pool == "":
		return c, fmt.Errorf("parameters.%s: required for type thin: the thin pool in volume group %s", ParamThinPool, c.VG)
	case c.Type == "linear" && c.Pool != "":
		return c, fmt.Errorf("parameters.%s: only for type thin: a linear LV takes its extents from the volume group", ParamThinPool)
	}
	r, ok := params[ParamOverprovision]
	if !ok {
		return c, nil
	}
	if c.Type != "thin" {
		return c, fmt.Errorf("parameters.%s: only for type thin: a linear LV is never overprovisioned", ParamOverprovision)
	}
	f, err := strconv.ParseFloat(r, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 1 {
		return c, fmt.Errorf("parameters.%s: %q: must be a number of at least 1 (1: the pool's free space, never more)", ParamOverprovision, r)
	}
	c.Ratio = f
	return c, nil
}

// LVMFree is what an lvm class draws from before any promise: the VG's
// free bytes for a linear LV; for a thin one, the pool's free data
// (its size less what its data percent says is used) times the ratio.
// A pool lvm2 reports no percent of (inactive: it is activated with its
// first thin LV) has nothing to promise: what it holds is not known.
func LVMFree(c LVMClass, vgFree, poolSize int64, poolDataPercent float64) int64 {
	if c.Type != "thin" {
		return vgFree
	}
	if poolDataPercent < 0 {
		return 0
	}
	free := float64(poolSize) * (100 - min(poolDataPercent, 100)) / 100
	return int64(free * c.Ratio)
}

package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/agent/decide"
)

// BackendLVM is the StorageClass parameter `backend: lvm`: one LV per
// volume, linear or thin, in a volume group the host gave the backend
// (run --csi-lvm-volume-groups). The LV is a desired-state entry of the
// lvm kind, made at first stage as a loop image is.
const BackendLVM = "lvm"

// LVM is what the lvm backend asks of lvm2 (kinds/lvm.Provisioner).
type LVM interface {
	// Group reads vg; Found is false when it is not there.
	Group(ctx context.Context, vg string) (LVMGroup, error)
	// Snapshot makes name, a thin snapshot of from, inactive, tagged as
	// volume's LV (a restore) or, volume "", as a CSI snapshot's. One
	// of that name so tagged is made already; another is refused.
	Snapshot(ctx context.Context, vg, from, name, volume string) error
	// Remove removes name when it is so tagged (never another LV, never
	// an open one); one already gone is removed.
	Remove(ctx context.Context, vg, name, volume string) error
}

// LVMGroup is a volume group as the backend reads it.
type LVMGroup struct {
	Found bool
	Free  int64
	LVs   []LVMVolume
}

// LVMVolume is one LV of an LVMGroup.
type LVMVolume struct {
	Name string
	Size int64
	// Thin: a thin LV; ThinPool: a thin pool, DataPercent its data's use
	// (-1: lvm2 says none, the pool is inactive).
	Thin, ThinPool bool
	DataPercent    float64
	Open           bool
	// Owner is the volume its volumed tag names ("": none); Snapshot
	// the CSI snapshot its snapshot tag names.
	Owner, Snapshot string
}

func (g LVMGroup) lv(name string) (LVMVolume, bool) {
	for _, lv := range g.LVs {
		if lv.Name == name {
			return lv, true
		}
	}
	return LVMVolume{}, false
}

// lvName is the LV of a provisioned volume's or snapshot's key: prefix
// and the key (lowercase letters, digits, '-': all lvm2 takes), or its
// hash when it holds a word lvm2 keeps for its own LVs. The prefix keeps
// them apart from the host's LVs, which volumed never takes over.
func lvName(prefix, key string) string {
	if !strings.Contains(key, "snapshot") && !strings.Contains(key, "pvmove") {
		return prefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return prefix + "h" + hex.EncodeToString(sum[:12])
}

const (
	lvPrefix   = "csi-"
	snapPrefix = "csi-snap-"
)

// lvmClass reads an lvm class's own parameters (decide.LVMParams).
func (s *Service) lvmClass(params map[string]string) (decide.LVMClass, error) {
	c, err := decide.LVMParams(params, s.cfg.LVMGroups)
	if err != nil {
		return c, status.Error(codes.InvalidArgument, err.Error())
	}
	return c, nil
}

// lvmParams are the class's own parameters, which the volume context
// carries as the lvm source's fields.
var lvmParams = []string{decide.ParamVolumeGroup, decide.ParamThinPool, decide.ParamType, decide.ParamOverprovision}

// lvmContext is the volume context of an lvm volume: the parameters
// less the class's own, and the lvm source's fields.
func lvmContext(params map[string]string, p *Provisioned) map[string]string {
	ctx := maps.Clone(params)
	if ctx == nil {
		ctx = map[string]string{}
	}
	for _, k := range lvmParams {
		delete(ctx, k)
	}
	ctx["lvm.volumeGroup"] = p.Class.VG
	ctx["lvm.name"] = p.LV
	ctx["lvm.size"] = strconv.FormatInt(p.SizeBytes, 10)
	ctx["lvm.type"] = p.Class.Type
	if p.Class.Pool != "" {
		ctx["lvm.thinPool"] = p.Class.Pool
	}
	return ctx
}

// group reads a VG through the port.
func (s *Service) group(ctx context.Context, vg string) (LVMGroup, error) {
	g, err := s.cfg.LVM.Group(ctx, vg)
	if err != nil {
		return g, status.Errorf(codes.Internal, "volume group %s: %v", vg, err)
	}
	return g, nil
}

// lvmCapacity is what an lvm class may still promise: decide.LVMFree,
// then the one rule (decide.PoolCapacity) over the records drawing on
// the same space (the VG's free extents for linear, the pool for thin),
// each promised less its LV's size once made. A VG or pool that is not
// there has nothing. Call with pmu held.
func (s *Service) lvmCapacity(ctx context.Context, c decide.LVMClass) (int64, error) {
	g, err := s.group(ctx, c.VG)
	if err != nil || !g.Found {
		return 0, err
	}
	var poolSize int64
	data := -1.0
	if c.Type == "thin" {
		pool, ok := g.lv(c.Pool)
		if !ok || !pool.ThinPool {
			return 0, nil
		}
		poolSize, data = pool.Size, pool.DataPercent
	}
	var promised []decide.Promise
	for _, p := range s.provisioned {
		if p.Class == nil || p.Class.VG != c.VG || p.Class.Type != c.Type || p.Class.Pool != c.Pool {
			continue
		}
		pr := decide.Promise{Size: p.SizeBytes}
		if lv, ok := g.lv(p.LV); ok {
			pr.Allocated = lv.Size
		}
		promised = append(promised, pr)
	}
	return decide.PoolCapacity(decide.LVMFree(c, g.Free, poolSize, data), 0, promised), nil
}

// lvmFree refuses a new volume's LV name that an LV already has: an LV
// no record accounts for is never taken over as a new volume's (the lvm
// kind would use an untagged LV of the name in place).
func (s *Service) lvmFree(ctx context.Context, p *Provisioned) error {
	g, err := s.group(ctx, p.Class.VG)
	if err != nil {
		return err
	}
	if !g.Found {
		return status.Errorf(codes.ResourceExhausted, "volume group %s is not on this node", p.Class.VG)
	}
	if _, ok := g.lv(p.LV); ok {
		return status.Errorf(codes.FailedPrecondition, "LV %s/%s: an LV is already there that no provisioned volume's record accounts for; volumed does not take it over (rename or remove it)", p.Class.VG, p.LV)
	}
	return nil
}

// lvmOpen says whether the volume's LV is open on this node (lvm2's
// device-open flag: mounted or held, by volumed or anyone).
func (s *Service) lvmOpen(ctx context.Context, p *Provisioned) (bool, error) {
	g, err := s.group(ctx, p.Class.VG)
	if err != nil {
		return false, err
	}
	lv, ok := g.lv(p.LV)
	return ok && lv.Open, nil
}

// lvmSnapshotReady: the snapshot's LV is there.
func (s *Service) lvmSnapshotReady(ctx context.Context, sn *Snapshot) bool {
	g, err := s.cfg.LVM.Group(ctx, sn.VG)
	if err != nil {
		return false
	}
	lv, ok := g.lv(sn.LV)
	return ok && lv.Snapshot == sn.LV
}

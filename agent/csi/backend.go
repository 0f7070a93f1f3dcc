package csi

import (
	"context"
	"os"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The backends side by side: which are served, and the few places where
// an image and an LV are handled apart. Every rule they share (capacity,
// deletion, sizes, repeats) is one decide function.

// controller says whether the Controller service is served: a loop pool
// or lvm volume groups are configured.
func (s *Service) controller() bool { return s.pool != nil || len(s.cfg.LVMGroups) > 0 }

// snapshotsServed: the loop pool reflinks, or thin LVs can be made.
func (s *Service) snapshotsServed() bool { return s.snapOK || len(s.cfg.LVMGroups) > 0 }

// backendsServed names the backends this node serves.
func (s *Service) backendsServed() []string {
	var out []string
	if s.pool != nil {
		out = append(out, BackendLoop)
	}
	if len(s.cfg.LVMGroups) > 0 {
		out = append(out, BackendLVM)
	}
	return out
}

// backendOf is the backend a class's parameters choose. A call without
// the parameter (csi-sanity's GetCapacity) is the loop pool's when there
// is one; CreateVolume must say.
func (s *Service) backendOf(params map[string]string, create bool) (string, error) {
	b, ok := params[paramBackend]
	if !ok && !create && s.pool != nil {
		return BackendLoop, nil
	}
	if !slices.Contains(s.backendsServed(), b) {
		return "", status.Errorf(codes.InvalidArgument, "parameters.%s: must be one of %q (the backends this node serves), got %q", paramBackend, s.backendsServed(), b)
	}
	return b, nil
}

// capacityOf is what the pool p draws on may still promise, and that
// pool's name for messages. Call with pmu held.
func (s *Service) capacityOf(ctx context.Context, p *Provisioned) (int64, string, error) {
	if p.Class != nil {
		n, err := s.lvmCapacity(ctx, *p.Class)
		where := "volume group " + p.Class.VG
		if p.Class.Pool != "" {
			where = "thin pool " + p.Class.VG + "/" + p.Class.Pool
		}
		return n, where, err
	}
	n, err := s.pool.capacity(s.provisioned, s.snapshots)
	if err != nil {
		return 0, "", status.Error(codes.Internal, err.Error())
	}
	return n, "the loop pool " + s.pool.dir, nil
}

// exists says whether p's image or LV is made.
func (s *Service) exists(ctx context.Context, p *Provisioned) (bool, error) {
	if p.Class == nil {
		_, err := os.Lstat(p.Image)
		return err == nil, nil
	}
	g, err := s.group(ctx, p.Class.VG)
	if err != nil {
		return false, err
	}
	_, ok := g.lv(p.LV)
	return ok, nil
}

// removeBacking removes p's image or LV; one already gone is removed.
func (s *Service) removeBacking(ctx context.Context, p *Provisioned) error {
	if p.Class != nil {
		return s.cfg.LVM.Remove(ctx, p.Class.VG, p.LV, VolumeName(p.VolumeID))
	}
	return removeImage(p.Image)
}

// backend is the backend a snapshot is of (records written before the
// lvm backend name none: loop).
func (sn *Snapshot) backend() string {
	if sn.Backend == "" {
		return BackendLoop
	}
	return sn.Backend
}

// snapshotReady says whether a snapshot's copy or LV is made.
func (s *Service) snapshotReady(ctx context.Context, sn *Snapshot) bool {
	if sn.backend() == BackendLVM {
		return s.lvmSnapshotReady(ctx, sn)
	}
	_, err := os.Lstat(sn.File)
	return err == nil
}

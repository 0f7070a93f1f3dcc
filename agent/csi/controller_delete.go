package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/internal/crashpoint"
)

// DeleteVolume removes a provisioned volume's image or LV, then its
// record: a crash in between leaves a record whose image or LV is gone,
// which the retried call finishes. It is refused while anything on the node still
// uses the image (decide.MayDelete). An ID this node never provisioned
// (or no longer has) is deleted already.
func (s *Service) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	// Claimed as the node calls claim it: no stage starts meanwhile.
	name, release, err := s.begin(id)
	if err != nil {
		return nil, err
	}
	defer release()
	s.pmu.Lock()
	defer s.pmu.Unlock()
	key, p := s.provisionedOf(id)
	if p == nil {
		return &csipb.DeleteVolumeResponse{}, nil
	}
	use, err := s.use(ctx, name, p)
	if err != nil {
		return nil, err
	}
	if why := decide.MayDelete(use); why != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s: %s", id, why)
	}
	if err := s.removeBacking(ctx, p); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", id, err)
	}
	crashpoint.HitFor("delete_volume", "after-image", name)
	if err := s.prov.remove(key); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", id, err)
	}
	delete(s.provisioned, key)
	s.cfg.Log.Info("csi volume deleted", "volumeID", id, "image", p.Image, "lv", p.LV)
	return &csipb.DeleteVolumeResponse{}, nil
}

// provisionedOf is the record of a volume ID this node provisioned, and
// its key; nil for any other ID. Call with pmu held.
func (s *Service) provisionedOf(id string) (string, *Provisioned) {
	backend, node, key, ok := parseProvisionedID(id)
	if !ok || !served(backend) || node != s.cfg.NodeID {
		return "", nil
	}
	if p := s.provisioned[key]; p != nil && p.VolumeID == id {
		return key, p
	}
	return "", nil
}

// use is what holds the provisioned volume on this node now: the
// kubelet's stage record, the agent's record of an attachment or mount
// (a teardown still running), a manifest's volume on the same image or
// LV, an LV open outside volumed.
func (s *Service) use(ctx context.Context, name string, p *Provisioned) (decide.Use, error) {
	v, ok := s.cfg.Agent.View(name)
	if !ok {
		return decide.Use{}, status.Error(codes.Unavailable, "the agent has not read the kernel's state yet")
	}
	u := decide.Use{Staged: s.record(name) != nil}
	if rec := v.Record; rec != nil {
		u.Attached = rec.Attachment != nil || rec.Staging != nil || len(rec.Targets) > 0
	}
	d, err := provisionedDesired(p, "", s.cfg.Manifest)
	if err != nil {
		return decide.Use{}, status.Error(codes.Internal, err.Error())
	}
	u.ClaimedBy = s.cfg.Agent.ClaimHolder(d.Kind, d.Caps.Claims, name)
	if p.Class != nil {
		if u.Open, err = s.lvmOpen(ctx, p); err != nil {
			return decide.Use{}, err
		}
	}
	return u, nil
}

// ControllerExpandVolume raises the promise (the pool must have the
// room); the image grows on the node, at NodeExpandVolume or the next
// stage, which is why node expansion is always required. A volume of
// another node is answered as asked with nothing done: the controller's
// side is bookkeeping, which that node does at its NodeExpandVolume, so
// one external-resizer (which has no per-node mode) serves every node
// from whichever node's socket it calls.
func (s *Service) ControllerExpandVolume(ctx context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(field{"volume ID", id}); err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity range is required")
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	key, p := s.provisionedOf(id)
	if p == nil {
		if b, node, _, ok := parseProvisionedID(id); ok && served(b) && node != s.cfg.NodeID {
			size, err := decide.VolumeSize(req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes(), 0)
			if err != nil {
				return nil, status.Error(codes.OutOfRange, err.Error())
			}
			return &csipb.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: true}, nil
		}
		return nil, status.Errorf(codes.NotFound, "volume %s: not provisioned by this node", id)
	}
	size, err := decide.VolumeSize(req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes(), p.SizeBytes)
	if err != nil {
		return nil, status.Error(codes.OutOfRange, err.Error())
	}
	if p, err = s.raisePromise(ctx, key, p, size); err != nil {
		return nil, err
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: p.SizeBytes, NodeExpansionRequired: true}, nil
}

// raisePromise keeps size as the volume's promise when it is more, and
// the pool has the room for the difference. Call with pmu held.
func (s *Service) raisePromise(ctx context.Context, key string, p *Provisioned, size int64) (*Provisioned, error) {
	if size <= p.SizeBytes {
		return p, nil
	}
	avail, pool, err := s.capacityOf(ctx, p)
	if err != nil {
		return nil, err
	}
	if size-p.SizeBytes > avail {
		return nil, status.Errorf(codes.OutOfRange, "volume %s: %d more bytes asked, %s can promise %d", p.VolumeID, size-p.SizeBytes, pool, avail)
	}
	c := p.clone()
	c.SizeBytes = size
	if err := s.prov.put(key, c); err != nil {
		return nil, status.Errorf(codes.Internal, "keep the new size durably: %v", err)
	}
	s.provisioned[key] = c
	return c, nil
}

// nodeExpandPromise raises the promise of a volume this node provisioned
// to what NodeExpandVolume asks (the resizer may have called another
// node's controller).
func (s *Service) nodeExpandPromise(ctx context.Context, id string, size int64) error {
	if !s.controller() {
		return nil
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	key, p := s.provisionedOf(id)
	if p == nil {
		return nil
	}
	_, err := s.raisePromise(ctx, key, p, size)
	return err
}

// promisedSize is the size a volume this node provisioned was last
// promised (an expansion the PV's context does not show), 0 for a static
// PV's volume. A volume this node provisioned and deleted is not found:
// staging it would make a new, empty image under the old PV.
func (s *Service) promisedSize(id string) (int64, error) {
	if !s.controller() {
		return 0, nil
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if _, p := s.provisionedOf(id); p != nil {
		return p.SizeBytes, nil
	}
	if b, node, _, ok := parseProvisionedID(id); ok && served(b) && node == s.cfg.NodeID {
		return 0, status.Errorf(codes.NotFound, "volume %s: this node provisioned no such volume (it was deleted)", id)
	}
	return 0, nil
}

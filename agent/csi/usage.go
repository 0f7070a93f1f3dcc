package csi

import (
	"context"
	"io"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/store"
)

// The calls about a volume in place: its usage, its health, its growth.

// NodeGetVolumeStats: capacity and inodes of the filesystem (bytes of a
// block volume), and the volume's condition from its conditions.
func (s *Service) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	id, p := req.GetVolumeId(), filepath.Clean(req.GetVolumePath())
	if err := required(field{"volume ID", id}, field{"volume path", req.GetVolumePath()}); err != nil {
		return nil, err
	}
	name := VolumeName(id)
	r := s.record(name)
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged on this node", id)
	}
	if _, ok := r.target(p); !ok && (r.Block || p != r.StagingPath) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not at %s", id, req.GetVolumePath())
	}
	resp := &csipb.NodeGetVolumeStatsResponse{}
	if r.Block {
		n, err := deviceBytes(p)
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "volume %s at %s: %v", id, p, err)
		}
		resp.Usage = []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: n}}
	} else {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			return nil, status.Errorf(codes.NotFound, "volume %s at %s: %v", id, p, err)
		}
		bs := int64(st.Bsize)
		resp.Usage = []*csipb.VolumeUsage{
			{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
			{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
		}
	}
	return resp, nil
}

// NodeGetVolumeHealth reports the volume's conditions (what volumed knows
// to be wrong with it); none is a healthy volume. CSI 1.13 replaced the
// VOLUME_CONDITION of NodeGetVolumeStats by this call.
func (s *Service) NodeGetVolumeHealth(ctx context.Context, req *csipb.NodeGetVolumeHealthRequest) (*csipb.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if err := required(field{"volume ID", id}); err != nil {
		return nil, err
	}
	name := VolumeName(id)
	r := s.record(name)
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged on this node", id)
	}
	if p := req.GetVolumePublishPath(); p != "" {
		if _, ok := r.target(filepath.Clean(p)); !ok {
			return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", id, p)
		}
	}
	h := &csipb.VolumeHealth{VolumeId: id}
	if v, ok := s.cfg.Agent.View(name); ok {
		for _, c := range v.Conditions {
			h.HealthStatuses = append(h.HealthStatuses, &csipb.VolumeHealth_VolumeHealthEntry{
				Status: healthOf(c.Type), Reason: c.Type + "/" + c.Reason, Message: c.Message,
			})
		}
	}
	return &csipb.NodeGetVolumeHealthResponse{VolumeHealth: h}, nil
}

// healthOf maps a condition type onto the CSI health kinds: the ones
// that keep the data from being reached are INACCESSIBLE, the rest
// DEGRADED (volumed never knows data to be lost).
func healthOf(typ string) csipb.VolumeHealthErrorType {
	switch typ {
	case agent.CondBackingChanged, agent.CondFormatRefused, agent.CondMountConfig, agent.CondIdentityChanged:
		return csipb.VolumeHealthErrorType_INACCESSIBLE
	}
	return csipb.VolumeHealthErrorType_DEGRADED
}

func deviceBytes(p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, io.SeekEnd)
}

// NodeExpandVolume grows the filesystem online onto its grown device; a
// loop image is first grown to the size asked for.
func (s *Service) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	id, p := req.GetVolumeId(), filepath.Clean(req.GetVolumePath())
	name, release, err := s.begin(id, field{"volume path", req.GetVolumePath()})
	if err != nil {
		return nil, err
	}
	defer release()
	r := s.record(name)
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged on this node", id)
	}
	if _, ok := r.target(p); !ok && (r.Block || p != r.StagingPath) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not at %s", id, req.GetVolumePath())
	}
	want := req.GetCapacityRange().GetRequiredBytes()
	if err := s.nodeExpandPromise(ctx, id, want); err != nil {
		return nil, err
	}
	if want > r.CapacityBytes {
		r.CapacityBytes = want
		d, err := desired(name, r, s.cfg.Manifest)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if err := s.commit(name, r, d); err != nil {
			return nil, err
		}
	}
	s.cfg.Agent.CheckGrowth()
	var got int64
	err = s.wait(ctx, name, id, growOps, "", func(rec *store.Volume) bool {
		switch {
		case r.Block:
			// No filesystem: the device itself, read at the target.
			got, _ = deviceBytes(p)
		case rec != nil && rec.Staging != nil:
			got = rec.Staging.DeviceBytes
		}
		return got >= want && got > 0
	})
	if err != nil {
		return nil, err
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: got}, nil
}

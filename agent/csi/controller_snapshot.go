package csi

import (
	"context"
	"os"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/volumed/volumed/internal/crashpoint"
)

// snapshotBackend names snapshots in IDs: "snap/<node>/<key>".
const snapshotBackend = "snap"

// Snapshot is what CreateSnapshot promised, kept durably before the copy
// is taken: a retried call finds it and finishes the copy.
type Snapshot struct {
	Name           string    `json:"name"`
	SnapshotID     string    `json:"snapshotID"`
	SourceVolumeID string    `json:"sourceVolumeID"`
	File           string    `json:"file"`
	SizeBytes      int64     `json:"sizeBytes"`
	Created        time.Time `json:"created"`
}

// CreateSnapshot takes a reflinked copy of a provisioned volume's image
// (flushed first when it is mounted: the copy is what a clean power cut
// would leave). The record is kept before the copy; a retried call
// finishes a copy a crash cut short.
func (s *Service) CreateSnapshot(_ context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	if err := required(field{"name", req.GetName()}, field{"source volume ID", req.GetSourceVolumeId()}); err != nil {
		return nil, err
	}
	if err := s.reachable(req.GetAccessibilityRequirements()); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	key := volumeKey(req.GetName())
	sn := s.snapshots[key]
	if sn != nil && (sn.Name != req.GetName() || sn.SourceVolumeID != req.GetSourceVolumeId()) {
		return nil, status.Errorf(codes.AlreadyExists, "snapshot %q: already taken of volume %s", req.GetName(), sn.SourceVolumeID)
	}
	_, p := s.provisionedOf(req.GetSourceVolumeId())
	if sn == nil {
		if p == nil {
			return nil, status.Errorf(codes.NotFound, "volume %s: not provisioned by this node", req.GetSourceVolumeId())
		}
		avail, err := s.pool.capacity(s.provisioned, s.snapshots)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if p.SizeBytes > avail {
			return nil, status.Errorf(codes.ResourceExhausted, "snapshot %q: its copy may come to hold %d bytes, the loop pool %s can promise %d", req.GetName(), p.SizeBytes, s.pool.dir, avail)
		}
		sn = &Snapshot{Name: req.GetName(), SnapshotID: provisionedID(snapshotBackend, s.cfg.NodeID, key), SourceVolumeID: p.VolumeID,
			File: s.pool.snapshotFile(key), SizeBytes: p.SizeBytes, Created: time.Now().UTC()}
		if err := s.snaps.put(key, sn); err != nil {
			return nil, status.Errorf(codes.Internal, "keep the snapshot durably: %v", err)
		}
		s.snapshots[key] = sn
		crashpoint.HitFor("create_snapshot", "after-record", VolumeName(p.VolumeID))
	}
	if _, err := os.Lstat(sn.File); err != nil {
		if p == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "snapshot %q: its copy was never made and volume %s is gone", sn.Name, sn.SourceVolumeID)
		}
		if err := s.copyImage(p, sn.File); err != nil {
			return nil, err
		}
	}
	return &csipb.CreateSnapshotResponse{Snapshot: snapshotOf(sn)}, nil
}

// copyImage flushes the volume's filesystem when it is staged here, and
// reflinks its image to file.
func (s *Service) copyImage(p *Provisioned, file string) error {
	if r := s.record(VolumeName(p.VolumeID)); r != nil && !r.Block {
		if err := flush(r.StagingPath); err != nil {
			return status.Errorf(codes.Internal, "flush volume %s before its snapshot: %v", p.VolumeID, err)
		}
	}
	if err := cloneFile(p.Image, file, p.SizeBytes); err != nil {
		return status.Errorf(codes.Internal, "snapshot of %s: %v", p.VolumeID, err)
	}
	return nil
}

// snapshotOf is the CSI snapshot a record names: ready once its copy is
// made. Its accessible topology (this node) is left out, which the spec
// allows: csi-sanity v5.6.0 compares a reported topology with
// gomega.Equal, reflect.DeepEqual over protobuf messages, which differ
// in their internal state once one of them has been marshalled.
func snapshotOf(sn *Snapshot) *csipb.Snapshot {
	_, err := os.Lstat(sn.File)
	return &csipb.Snapshot{SnapshotId: sn.SnapshotID, SourceVolumeId: sn.SourceVolumeID, SizeBytes: sn.SizeBytes,
		CreationTime: timestamppb.New(sn.Created), ReadyToUse: err == nil}
}

// GetSnapshot is one snapshot this node took.
func (s *Service) GetSnapshot(_ context.Context, req *csipb.GetSnapshotRequest) (*csipb.GetSnapshotResponse, error) {
	if err := required(field{"snapshot ID", req.GetSnapshotId()}); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	_, sn := s.snapshotByID(req.GetSnapshotId())
	if sn == nil {
		return nil, status.Errorf(codes.NotFound, "snapshot %s: not taken by this node", req.GetSnapshotId())
	}
	return &csipb.GetSnapshotResponse{Snapshot: snapshotOf(sn)}, nil
}

// snapshotByID is the record of a snapshot ID this node took, and its key.
// Call with pmu held.
func (s *Service) snapshotByID(id string) (string, *Snapshot) {
	backend, node, key, ok := parseProvisionedID(id)
	if !ok || backend != snapshotBackend || node != s.cfg.NodeID {
		return "", nil
	}
	if sn := s.snapshots[key]; sn != nil && sn.SnapshotID == id {
		return key, sn
	}
	return "", nil
}

// DeleteSnapshot removes the copy, then the record; an unknown ID is
// deleted already. Volumes restored from it keep their data: they are
// copies of their own.
func (s *Service) DeleteSnapshot(_ context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	if err := required(field{"snapshot ID", req.GetSnapshotId()}); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	key, sn := s.snapshotByID(req.GetSnapshotId())
	if sn == nil {
		return &csipb.DeleteSnapshotResponse{}, nil
	}
	if err := removeImage(sn.File); err != nil {
		return nil, status.Errorf(codes.Internal, "snapshot %s: %v", sn.SnapshotID, err)
	}
	crashpoint.HitFor("delete_snapshot", "after-file", sn.Name)
	if err := s.snaps.remove(key); err != nil {
		return nil, status.Errorf(codes.Internal, "snapshot %s: %v", sn.SnapshotID, err)
	}
	delete(s.snapshots, key)
	return &csipb.DeleteSnapshotResponse{}, nil
}

// ListSnapshots pages through the snapshots in ID order, as ListVolumes.
func (s *Service) ListSnapshots(_ context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	after := req.GetStartingToken()
	if err := s.checkPaging(req.GetMaxEntries(), after, snapshotBackend); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	var out []*csipb.Snapshot
	for _, sn := range s.snapshots {
		if sn.SnapshotID > after && (req.GetSnapshotId() == "" || req.GetSnapshotId() == sn.SnapshotID) &&
			(req.GetSourceVolumeId() == "" || req.GetSourceVolumeId() == sn.SourceVolumeID) {
			out = append(out, snapshotOf(sn))
		}
	}
	s.pmu.Unlock()
	resp := &csipb.ListSnapshotsResponse{}
	out, resp.NextToken = listPage(out, (*csipb.Snapshot).GetSnapshotId, req.GetMaxEntries())
	for _, sn := range out {
		resp.Entries = append(resp.Entries, &csipb.ListSnapshotsResponse_Entry{Snapshot: sn})
	}
	return resp, nil
}

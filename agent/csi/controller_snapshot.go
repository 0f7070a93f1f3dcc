package csi

import (
	"context"
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
	Name           string `json:"name"`
	SnapshotID     string `json:"snapshotID"`
	SourceVolumeID string `json:"sourceVolumeID"`
	File           string `json:"file,omitempty"`
	// Backend is lvm for a thin snapshot (VG, LV), else loop's copy (File).
	Backend   string    `json:"backend,omitempty"`
	VG        string    `json:"volumeGroup,omitempty"`
	Pool      string    `json:"thinPool,omitempty"`
	LV        string    `json:"lv,omitempty"`
	SizeBytes int64     `json:"sizeBytes"`
	Created   time.Time `json:"created"`
}

// CreateSnapshot takes a reflinked copy of a loop volume's image, or a
// thin snapshot of a thin LV (the volume's filesystem flushed first when
// it is mounted: the copy is what a clean power cut would leave). The
// record is kept before the copy; a retried call finishes a copy a crash
// cut short.
func (s *Service) CreateSnapshot(ctx context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
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
		var err error
		if sn, err = s.newSnapshot(req.GetName(), key, p); err != nil {
			return nil, err
		}
		if err := s.snaps.put(key, sn); err != nil {
			return nil, status.Errorf(codes.Internal, "keep the snapshot durably: %v", err)
		}
		s.snapshots[key] = sn
		crashpoint.HitFor("create_snapshot", "after-record", VolumeName(p.VolumeID))
	}
	if !s.snapshotReady(ctx, sn) {
		if p == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "snapshot %q: its copy was never made and volume %s is gone", sn.Name, sn.SourceVolumeID)
		}
		if err := s.copyVolume(ctx, p, sn); err != nil {
			return nil, err
		}
	}
	return &csipb.CreateSnapshotResponse{Snapshot: s.snapshotOf(ctx, sn)}, nil
}

// newSnapshot is the record of a snapshot of p, when its backend can
// take one: a thin LV (a thin snapshot takes no space until either side
// is written, and is overprovisioned as the pool is), or an image on a
// pool that reflinks (promised in full: see loopPool.capacity).
func (s *Service) newSnapshot(name, key string, p *Provisioned) (*Snapshot, error) {
	sn := &Snapshot{Name: name, SnapshotID: provisionedID(snapshotBackend, s.cfg.NodeID, key), SourceVolumeID: p.VolumeID,
		SizeBytes: p.SizeBytes, Created: time.Now().UTC()}
	if c := p.Class; c != nil {
		if c.Type != "thin" {
			return nil, status.Errorf(codes.InvalidArgument, "volume %s is a %s LV: volumed takes LVM snapshots of thin LVs only (a class with type: thin)", p.VolumeID, c.Type)
		}
		sn.Backend, sn.VG, sn.Pool, sn.LV = BackendLVM, c.VG, c.Pool, lvName(snapPrefix, key)
		return sn, nil
	}
	if !s.snapOK {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: the loop pool %s cannot reflink (snapshots need xfs with reflink or btrfs)", p.VolumeID, s.pool.dir)
	}
	avail, err := s.pool.capacity(s.provisioned, s.snapshots)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if p.SizeBytes > avail {
		return nil, status.Errorf(codes.ResourceExhausted, "snapshot %q: its copy may come to hold %d bytes, the loop pool %s can promise %d", name, p.SizeBytes, s.pool.dir, avail)
	}
	sn.File = s.pool.snapshotFile(key)
	return sn, nil
}

// copyVolume flushes the volume's filesystem when it is staged here,
// then reflinks its image to the snapshot's file, or takes the thin
// snapshot of its LV.
func (s *Service) copyVolume(ctx context.Context, p *Provisioned, sn *Snapshot) error {
	if r := s.record(VolumeName(p.VolumeID)); r != nil && !r.Block {
		if err := flush(r.StagingPath); err != nil {
			return status.Errorf(codes.Internal, "flush volume %s before its snapshot: %v", p.VolumeID, err)
		}
	}
	if p.Class == nil {
		if err := cloneFile(p.Image, sn.File, p.SizeBytes); err != nil {
			return status.Errorf(codes.Internal, "snapshot of %s: %v", p.VolumeID, err)
		}
		return nil
	}
	made, err := s.exists(ctx, p)
	if err != nil {
		return err
	}
	if !made {
		return status.Errorf(codes.FailedPrecondition, "snapshot of %s: its LV %s/%s is made at the volume's first stage, not yet", p.VolumeID, p.Class.VG, p.LV)
	}
	if err := s.cfg.LVM.Snapshot(ctx, sn.VG, p.LV, sn.LV, ""); err != nil {
		return status.Errorf(codes.Internal, "snapshot of %s: %v", p.VolumeID, err)
	}
	return nil
}

// snapshotOf is the CSI snapshot a record names: ready once its copy is
// made. Its accessible topology (this node) is left out, which the spec
// allows: csi-sanity v5.6.0 compares a reported topology with
// gomega.Equal, reflect.DeepEqual over protobuf messages, which differ
// in their internal state once one of them has been marshalled.
func (s *Service) snapshotOf(ctx context.Context, sn *Snapshot) *csipb.Snapshot {
	return &csipb.Snapshot{SnapshotId: sn.SnapshotID, SourceVolumeId: sn.SourceVolumeID, SizeBytes: sn.SizeBytes,
		CreationTime: timestamppb.New(sn.Created), ReadyToUse: s.snapshotReady(ctx, sn)}
}

// GetSnapshot is one snapshot this node took.
func (s *Service) GetSnapshot(ctx context.Context, req *csipb.GetSnapshotRequest) (*csipb.GetSnapshotResponse, error) {
	if err := required(field{"snapshot ID", req.GetSnapshotId()}); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	_, sn := s.snapshotByID(req.GetSnapshotId())
	if sn == nil {
		return nil, status.Errorf(codes.NotFound, "snapshot %s: not taken by this node", req.GetSnapshotId())
	}
	return &csipb.GetSnapshotResponse{Snapshot: s.snapshotOf(ctx, sn)}, nil
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

// DeleteSnapshot removes the copy or the snapshot's LV, then the record;
// an unknown ID is deleted already. Volumes restored from it keep their
// data: they are copies (or thin snapshots) of their own.
func (s *Service) DeleteSnapshot(ctx context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	if err := required(field{"snapshot ID", req.GetSnapshotId()}); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	key, sn := s.snapshotByID(req.GetSnapshotId())
	if sn == nil {
		return &csipb.DeleteSnapshotResponse{}, nil
	}
	var err error
	if sn.backend() == BackendLVM {
		err = s.cfg.LVM.Remove(ctx, sn.VG, sn.LV, "")
	} else {
		err = removeImage(sn.File)
	}
	if err != nil {
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
func (s *Service) ListSnapshots(ctx context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	after := req.GetStartingToken()
	if err := s.checkPaging(req.GetMaxEntries(), after, snapshotBackend); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	var out []*csipb.Snapshot
	for _, sn := range s.snapshots {
		if sn.SnapshotID > after && (req.GetSnapshotId() == "" || req.GetSnapshotId() == sn.SnapshotID) &&
			(req.GetSourceVolumeId() == "" || req.GetSourceVolumeId() == sn.SourceVolumeID) {
			out = append(out, s.snapshotOf(ctx, sn))
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

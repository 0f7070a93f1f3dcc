package csi

import (
	"context"
	"maps"
	"slices"
	"sort"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ControllerGetCapabilities lists the controller RPCs served. Expansion
// is the node's (NodeExpandVolume grows the image); the controller only
// raises the promise.
func (s *Service) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	var caps []*csipb.ControllerServiceCapability
	for _, t := range []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_GET_CAPACITY,
		csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
	} {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	if s.snapshotsServed() {
		for _, t := range []csipb.ControllerServiceCapability_RPC_Type{
			csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
			csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
			csipb.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		} {
			caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
		}
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// GetCapacity is what the pool a class draws on may still promise
// (decide.PoolCapacity), for this node's topology; another node's is
// none of this node's.
func (s *Service) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	backend, err := s.backendOf(req.GetParameters(), false)
	if err != nil {
		return nil, err
	}
	p := &Provisioned{Backend: backend}
	if backend == BackendLVM {
		c, err := s.lvmClass(req.GetParameters())
		if err != nil {
			return nil, err
		}
		p.Class = &c
	}
	if seg := req.GetAccessibleTopology().GetSegments(); seg != nil && seg[TopologyKey] != s.cfg.NodeID {
		return &csipb.GetCapacityResponse{}, nil
	}
	s.pmu.Lock()
	avail, _, err := s.capacityOf(ctx, p)
	s.pmu.Unlock()
	if err != nil {
		return nil, err
	}
	return &csipb.GetCapacityResponse{AvailableCapacity: avail, MaximumVolumeSize: wrapperspb.Int64(avail)}, nil
}

// ListVolumes pages through the provisioned volumes in volume ID order.
// The token is the last ID of the page before, so a volume deleted or
// added between pages neither repeats nor shifts one.
func (s *Service) ListVolumes(_ context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	after := req.GetStartingToken()
	if err := s.checkPaging(req.GetMaxEntries(), after, ""); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	vols := make([]*csipb.Volume, 0, len(s.provisioned))
	for _, p := range s.provisioned {
		if p.VolumeID > after {
			vols = append(vols, s.volumeOf(p))
		}
	}
	s.pmu.Unlock()
	resp := &csipb.ListVolumesResponse{}
	vols, resp.NextToken = listPage(vols, (*csipb.Volume).GetVolumeId, req.GetMaxEntries())
	for _, v := range vols {
		resp.Entries = append(resp.Entries, &csipb.ListVolumesResponse_Entry{Volume: v})
	}
	return resp, nil
}

// checkPaging checks a list call's page size and token: a token is an ID
// of backend ("": of any volume backend) this node gave (ABORTED
// otherwise, as the spec asks).
func (s *Service) checkPaging(max int32, token, backend string) error {
	if max < 0 {
		return status.Error(codes.InvalidArgument, "max entries must not be negative")
	}
	b, node, _, ok := parseProvisionedID(token)
	if token != "" && (!ok || (b != backend && (backend != "" || !served(b))) || node != s.cfg.NodeID) {
		return status.Errorf(codes.Aborted, "starting token %q: not one this node gave", token)
	}
	return nil
}

// listPage sorts items by ID and cuts a page of at most max (0: all);
// the next token is the page's last ID when more follow.
func listPage[T any](items []T, id func(T) string, max int32) ([]T, string) {
	sort.Slice(items, func(i, j int) bool { return id(items[i]) < id(items[j]) })
	if n := int(max); n > 0 && len(items) > n {
		return items[:n], id(items[n-1])
	}
	return items, ""
}

// ValidateVolumeCapabilities confirms the capabilities a provisioned
// volume serves: its access type, on this node only.
func (s *Service) ValidateVolumeCapabilities(_ context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if err := required(field{"volume ID", id}); err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	s.pmu.Lock()
	_, p := s.provisionedOf(id)
	if p != nil {
		p = p.clone()
	}
	s.pmu.Unlock()
	if p == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: not provisioned by this node", id)
	}
	block, err := provisionedAccess(req.GetVolumeCapabilities())
	if err != nil {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	if block != p.Request.Block {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: "the volume was provisioned for another access type"}, nil
	}
	params := maps.Clone(req.GetParameters())
	delete(params, paramBackend)
	if len(req.GetParameters()) > 0 && !maps.Equal(params, p.Request.Params) {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: "the volume was provisioned with other parameters"}, nil
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: slices.Clone(req.GetVolumeCapabilities()),
		Parameters:         req.GetParameters(),
	}}, nil
}

// Package csi serves volumed as a Kubernetes CSI node plugin: the kubelet
// becomes one more source of desired state beside the manifests. Each
// NodeStage/NodePublish call is translated into the desired-state entry
// a manifest with the same source would make (translate.go), kept
// durably (records.go), handed to the agent, and waited for; the
// agent's executor, store, reconstruction and status do the rest.
package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/unixsock"
)

// DriverName is the CSI driver's name (the CSIDriver object's).
const DriverName = "volumed.io"

// TopologyKey is the topology segment naming the node.
const TopologyKey = "topology.volumed.io/node"

// Config wires the service.
type Config struct {
	Agent *agent.Agent
	// Dir holds the records (<state-dir>/csi).
	Dir    string
	NodeID string
	// Manifest gives the kinds and the state dir the translation checks with.
	Manifest manifest.Options
	Version  string
	Log      *slog.Logger
	// AllowSuidDev lets a volume context set filesystem.allowSuid and
	// allowDev (run --csi-allow-suid-dev); otherwise CSI mounts are
	// always nosuid,nodev.
	AllowSuidDev bool
	// LoopPool is the loop backend's image directory (run
	// --csi-loop-pool); set, the Controller service is served too.
	LoopPool string
	// LoopReserve is kept free on the pool's filesystem.
	LoopReserve int64
	// LVMGroups are the volume groups the lvm backend may make LVs in
	// (run --csi-lvm-volume-groups); set, the Controller service is
	// served too, through LVM.
	LVMGroups []string
	LVM       LVM
}

// Service is the Identity and Node services, and the Controller service
// when a pool is configured.
type Service struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	csipb.UnimplementedControllerServer

	cfg  Config
	recs records

	mu sync.Mutex
	// records are the volumes the kubelet staged, by volumed name.
	records map[string]*Record
	// busy: a call on the volume is running; another one gets Aborted.
	busy map[string]bool

	// pool is nil when no backend is configured (no Controller service).
	pool  *loopPool
	prov  keyedRecords[Provisioned]
	snaps keyedRecords[Snapshot]
	// pmu orders the controller calls: each reads the pool's capacity
	// and the promises together with the change it makes.
	pmu sync.Mutex
	// provisioned are the volumes CreateVolume promised, by key.
	provisioned map[string]*Provisioned
	// snapshots are the copies CreateSnapshot took, by key; served
	// only when the pool's filesystem reflinks (snapOK).
	snapshots map[string]*Snapshot
	snapOK    bool
}

// New loads the records kept by an earlier run and hands every volume in
// them to the agent as desired state. Call it before the agent's Run, so
// that the first pass never tears down a volume the kubelet staged.
func New(cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.NodeID == "" {
		return nil, errors.New("csi: a node ID is required")
	}
	s := &Service{cfg: cfg, recs: records{dir: cfg.Dir}, records: map[string]*Record{}, busy: map[string]bool{}}
	// A record that cannot be read or translated stops the start: without
	// it the first pass would tear its volume down under a running pod.
	recs, err := s.recs.load()
	if err != nil {
		return nil, fmt.Errorf("%w; volumed will not start rather than tear those volumes down: fix or remove them", err)
	}
	for name, r := range recs {
		d, err := desired(name, r, cfg.Manifest)
		if err != nil {
			return nil, fmt.Errorf("csi record %s: %w; volumed will not start rather than tear the volume down: fix or remove the record", s.recs.path(name), err)
		}
		s.records[name] = r
		cfg.Agent.SetDesired(d)
	}
	if len(s.records) > 0 {
		cfg.Log.Info("csi volumes restored from their records", "volumes", len(s.records))
	}
	if err := s.loadProvisioned(); err != nil {
		return nil, err
	}
	return s, nil
}

// loadProvisioned reads the promises of an earlier run: a pool that
// forgot one would promise its space again.
func (s *Service) loadProvisioned() error {
	s.prov = keyedRecords[Provisioned]{dir: filepath.Join(s.cfg.Dir, provisionedDir), what: "csi provisioned records"}
	s.snaps = keyedRecords[Snapshot]{dir: filepath.Join(s.cfg.Dir, snapshotDir), what: "csi snapshot records"}
	s.provisioned, s.snapshots = map[string]*Provisioned{}, map[string]*Snapshot{}
	if len(s.cfg.LVMGroups) > 0 && s.cfg.LVM == nil {
		return errors.New("csi: the lvm backend's volume groups are given without its lvm2 port")
	}
	if s.cfg.LoopPool != "" {
		if !filepath.IsAbs(s.cfg.LoopPool) {
			return fmt.Errorf("--csi-loop-pool %q: must be an absolute path", s.cfg.LoopPool)
		}
		if err := os.MkdirAll(s.cfg.LoopPool, 0o700); err != nil {
			return fmt.Errorf("--csi-loop-pool: %w", err)
		}
		s.pool = &loopPool{dir: filepath.Clean(s.cfg.LoopPool), reserve: s.cfg.LoopReserve}
	}
	if !s.controller() {
		return nil
	}
	ps, err := s.prov.load()
	if err != nil {
		return fmt.Errorf("%w; volumed will not start rather than promise those volumes' space again: fix or remove them", err)
	}
	ss, err := s.snaps.load()
	if err != nil {
		return fmt.Errorf("%w; volumed will not start rather than promise those snapshots' space again: fix or remove them", err)
	}
	s.provisioned, s.snapshots = ps, ss
	s.snapOK = s.pool != nil && s.pool.reflinks()
	return nil
}

// Listen opens the endpoint: unix:///path or a plain path. It is taken
// as the local API's socket is (internal/unixsock): a stale socket file
// is replaced, one another agent answers on is refused, whatever state
// dir that agent has.
func Listen(endpoint string) (net.Listener, error) {
	p, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok && strings.Contains(endpoint, "://") {
		return nil, fmt.Errorf("csi endpoint %q: only unix:// endpoints are served", endpoint)
	}
	if !ok {
		p = endpoint
	}
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("csi endpoint %q: the socket path must be absolute", endpoint)
	}
	ln, err := unixsock.Listen(p, unixsock.Options{DirMode: 0o750, Flag: "--csi-endpoint"})
	if err != nil {
		return nil, fmt.Errorf("csi endpoint: %w", err)
	}
	return ln, nil
}

// Serve answers on ln until ctx ends. Calls still waiting are cancelled:
// the kubelet retries them against the next run, which finds the work
// done or finishes it.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.logCalls))
	csipb.RegisterIdentityServer(srv, s)
	csipb.RegisterNodeServer(srv, s)
	if s.controller() {
		csipb.RegisterControllerServer(srv, s)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			srv.Stop()
		case <-done:
		}
	}()
	// Only root: the kubelet runs as root, and a caller of the node
	// service mounts devices on the host.
	err := srv.Serve(unixsock.RootOnly(ln, s.cfg.Log, nil))
	close(done)
	if ctx.Err() != nil || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// logCalls logs each call's method, volume and result; never a request
// body (secrets travel in it).
func (s *Service) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	if mutating(method) {
		attrs := []any{"method", method}
		if v, ok := req.(interface{ GetVolumeId() string }); ok {
			attrs = append(attrs, "volumeID", v.GetVolumeId())
		}
		switch {
		case err != nil:
			s.cfg.Log.Warn("csi call failed", append(attrs, "code", status.Code(err).String(), "error", status.Convert(err).Message())...)
		case strings.HasPrefix(method, "NodeGetVolume"):
			// The kubelet asks for stats and health of every volume, often.
			s.cfg.Log.Debug("csi call", attrs...)
		default:
			s.cfg.Log.Info("csi call", attrs...)
		}
	}
	return resp, err
}

// mutating says whether a call changes a volume (logged at info).
func mutating(method string) bool {
	switch method {
	case "NodeGetCapabilities", "NodeGetInfo", "ControllerGetCapabilities", "GetCapacity", "ListVolumes", "ValidateVolumeCapabilities", "ListSnapshots", "GetSnapshot":
		return false
	}
	return strings.HasPrefix(method, "Node") || strings.HasPrefix(method, "Controller") || strings.HasSuffix(method, "Volume") || strings.HasSuffix(method, "Snapshot")
}

// GetPluginInfo names the driver.
func (s *Service) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	v := s.cfg.Version
	if v == "" {
		v = "dev"
	}
	return &csipb.GetPluginInfoResponse{Name: DriverName, VendorVersion: v}, nil
}

// GetPluginCapabilities: a node plugin with topology whose volumes grow
// while published; with a pool, a controller service too (distributed
// provisioning: the provisioner sidecar of each node calls its own
// node's); without, volumes are pre-provisioned (static PVs).
func (s *Service) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	caps := []*csipb.PluginCapability{
		{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}},
		{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{Type: csipb.PluginCapability_VolumeExpansion_ONLINE}}},
	}
	if s.controller() {
		caps = append(caps, &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	if s.snapshotsServed() {
		// A snapshot lives on this node's disk: restored here only.
		caps = append(caps, &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_SNAPSHOT_ACCESSIBILITY_CONSTRAINTS}}})
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe is ready once the agent has reconstructed its state and settled.
func (s *Service) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(s.cfg.Agent.Settled())}, nil
}

// NodeGetInfo: the node ID and its topology segment.
func (s *Service) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{
		NodeId:             s.cfg.NodeID,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{TopologyKey: s.cfg.NodeID}},
	}, nil
}

// NodeGetCapabilities lists the node RPCs served.
func (s *Service) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, t := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// claim marks the volume busy for one call; a second concurrent call on
// it gets Aborted, as the CSI spec asks.
func (s *Service) claim(name, volumeID string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[name] {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %s is already in progress", volumeID)
	}
	s.busy[name] = true
	return func() {
		s.mu.Lock()
		delete(s.busy, name)
		s.mu.Unlock()
	}, nil
}

func (s *Service) record(name string) *Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.records[name]; r != nil {
		return r.clone()
	}
	return nil
}

// commit keeps r durably, then makes it the volume's desired state
// (r nil: removes both). The record is written first: a crash between
// the two leaves a record that the next start hands to the agent.
func (s *Service) commit(name string, r *Record, d *agent.Desired) error {
	if r == nil {
		if err := s.recs.remove(name); err != nil {
			return status.Errorf(codes.Internal, "%v", err)
		}
		s.mu.Lock()
		delete(s.records, name)
		s.mu.Unlock()
		s.cfg.Agent.RemoveDesired(name)
		return nil
	}
	if err := s.recs.put(name, r); err != nil {
		return status.Errorf(codes.Internal, "keep the request durably: %v", err)
	}
	s.mu.Lock()
	s.records[name] = r
	s.mu.Unlock()
	s.cfg.Agent.SetDesired(d)
	return nil
}

package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// csiNodeID is the node ID the CSI tests give the agent.
const csiNodeID = "e2e-node"

// startCSI starts the agent serving the CSI node service too and returns
// a client connection to it, ready (Probe says so).
func (e *env) startCSI(extraEnv ...string) *grpc.ClientConn {
	e.t.Helper()
	sock := filepath.Join(e.dir, "csi.sock")
	if len(e.extraArgs) == 0 {
		e.extraArgs = []string{"--csi-endpoint", "unix://" + sock, "--node-id", csiNodeID}
	}
	e.start(extraEnv...)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

// csiReady waits until Probe answers ready.
func (e *env) csiReady(conn *grpc.ClientConn) {
	e.t.Helper()
	id := csipb.NewIdentityClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := id.Probe(ctx, &csipb.ProbeRequest{})
		cancel()
		if err == nil && r.GetReady().GetValue() {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("CSI Probe not ready after 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loopContext is the volume context of a loop image under the env,
// created by volumed at stage with size bytes.
func (e *env) loopContext(name string, size int64) map[string]string {
	return map[string]string{
		"loop.file":        filepath.Join(e.images, name+".img"),
		"loop.create.size": strconv.FormatInt(size, 10),
		// What the kubelet adds when podInfoOnMount is set: ignored.
		"csi.storage.k8s.io/pod.name": "app-0",
	}
}

func mountCap(mode csipb.VolumeCapability_AccessMode_Mode, fsType string) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType, MountFlags: []string{"noatime"}}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap() *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// provisioner stands in for the cluster's provisioning of pre-made
// volumes (an administrator writing static PVs): it hands out loop-image
// volume contexts under dir and forwards Identity and Node calls to the
// plugin unchanged, adding only CONTROLLER_SERVICE to the plugin's
// capabilities so that csi-sanity's node specs have volumes to work on.
// Its own Controller answers are not volumed's and not under test.
type provisioner struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedControllerServer
	csipb.UnimplementedNodeServer
	dir      string
	identity csipb.IdentityClient
	node     csipb.NodeClient
}

func serveProvisioner(t *testing.T, sock, dir string, plugin *grpc.ClientConn) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &provisioner{dir: dir, identity: csipb.NewIdentityClient(plugin), node: csipb.NewNodeClient(plugin)}
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, p)
	csipb.RegisterControllerServer(srv, p)
	csipb.RegisterNodeServer(srv, p)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
}

func (p *provisioner) GetPluginInfo(ctx context.Context, r *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return p.identity.GetPluginInfo(ctx, r)
}

func (p *provisioner) Probe(ctx context.Context, r *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return p.identity.Probe(ctx, r)
}

func (p *provisioner) GetPluginCapabilities(ctx context.Context, r *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	resp, err := p.identity.GetPluginCapabilities(ctx, r)
	if err != nil {
		return nil, err
	}
	resp.Capabilities = append(resp.Capabilities, &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{
		Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}}})
	return resp, nil
}

func (p *provisioner) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: []*csipb.ControllerServiceCapability{{
		Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}},
	}}}, nil
}

// CreateVolume names a loop image that volumed creates at stage.
func (p *provisioner) CreateVolume(_ context.Context, r *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	size := r.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		size = 64 << 20
	}
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{
		VolumeId:      r.GetName(),
		CapacityBytes: size,
		VolumeContext: map[string]string{
			"loop.file":        filepath.Join(p.dir, r.GetName()+".img"),
			"loop.create.size": strconv.FormatInt(size, 10),
			// ext4 grows online only with CAP_SYS_RESOURCE, which this
			// machine's tests lack (see drivers/blockfs); btrfs grows.
			"filesystem.type": "btrfs",
		},
	}}, nil
}

func (p *provisioner) DeleteVolume(_ context.Context, r *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	_ = os.Remove(filepath.Join(p.dir, filepath.Base(r.GetVolumeId())+".img"))
	return &csipb.DeleteVolumeResponse{}, nil
}

func (p *provisioner) NodeStageVolume(ctx context.Context, r *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	return p.node.NodeStageVolume(ctx, r)
}

func (p *provisioner) NodeUnstageVolume(ctx context.Context, r *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	return p.node.NodeUnstageVolume(ctx, r)
}

func (p *provisioner) NodePublishVolume(ctx context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	return p.node.NodePublishVolume(ctx, r)
}

func (p *provisioner) NodeUnpublishVolume(ctx context.Context, r *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	return p.node.NodeUnpublishVolume(ctx, r)
}

func (p *provisioner) NodeGetVolumeStats(ctx context.Context, r *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	return p.node.NodeGetVolumeStats(ctx, r)
}

func (p *provisioner) NodeGetVolumeHealth(ctx context.Context, r *csipb.NodeGetVolumeHealthRequest) (*csipb.NodeGetVolumeHealthResponse, error) {
	return p.node.NodeGetVolumeHealth(ctx, r)
}

func (p *provisioner) NodeGetStorageHealth(ctx context.Context, r *csipb.NodeGetStorageHealthRequest) (*csipb.NodeGetStorageHealthResponse, error) {
	return p.node.NodeGetStorageHealth(ctx, r)
}

func (p *provisioner) NodeExpandVolume(ctx context.Context, r *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	return p.node.NodeExpandVolume(ctx, r)
}

func (p *provisioner) NodeGetCapabilities(ctx context.Context, r *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return p.node.NodeGetCapabilities(ctx, r)
}

func (p *provisioner) NodeGetInfo(ctx context.Context, r *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return p.node.NodeGetInfo(ctx, r)
}

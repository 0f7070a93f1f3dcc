package e2e

import (
	"context"
	"path/filepath"
	"strconv"
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

// Command vmcsi plays the kubelet's part against volumed's CSI node
// service inside the test VM, for scenarios/csi.sh. It is test-only.
//
//	vmcsi ENDPOINT stage   ID STAGING (mount FSTYPE | block) [KEY=VALUE...] [secret:KEY=VALUE...]
//	vmcsi ENDPOINT publish ID STAGING TARGET (mount FSTYPE | block) [ro]
//	vmcsi ENDPOINT unpublish ID TARGET
//	vmcsi ENDPOINT unstage ID STAGING
//	vmcsi ENDPOINT probe
//
// and the Controller service's calls (controller.go), as the
// external-provisioner, -resizer and -snapshotter sidecars make them.
//
// A secret's value is read from a file: secret:KEY=@FILE, so that it is
// on no command line.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vmcsi:", err)
		os.Exit(1)
	}
}

func capability(args []string) (*csipb.VolumeCapability, []string, error) {
	c := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	switch {
	case len(args) >= 2 && args[0] == "mount":
		c.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: args[1]}}
		return c, args[2:], nil
	case len(args) >= 1 && args[0] == "block":
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return c, args[1:], nil
	}
	return nil, nil, fmt.Errorf("want mount FSTYPE or block, got %q", args)
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: vmcsi ENDPOINT probe|stage|publish|unpublish|unstage ARGS")
	}
	conn, err := grpc.NewClient(args[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	// A first stage under emulation may create an LV and run mkfs.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node := csipb.NewNodeClient(conn)
	op, rest := args[1], args[2:]
	switch {
	case op == "probe":
		r, err := csipb.NewIdentityClient(conn).Probe(ctx, &csipb.ProbeRequest{})
		if err != nil {
			return err
		}
		if !r.GetReady().GetValue() {
			return fmt.Errorf("not ready")
		}
		return nil
	case op == "stage" && len(rest) >= 3:
		c, kv, err := capability(rest[2:])
		if err != nil {
			return err
		}
		vc, secrets := map[string]string{}, map[string]string{}
		for _, a := range kv {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				return fmt.Errorf("%q: want KEY=VALUE", a)
			}
			if sk, isSecret := strings.CutPrefix(k, "secret:"); isSecret {
				b, err := os.ReadFile(strings.TrimPrefix(v, "@"))
				if err != nil {
					return err
				}
				secrets[sk] = strings.TrimSpace(string(b))
				continue
			}
			vc[k] = v
		}
		_, err = node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: rest[0], StagingTargetPath: rest[1], VolumeCapability: c, VolumeContext: vc, Secrets: secrets})
		return err
	case op == "publish" && len(rest) >= 4:
		c, more, err := capability(rest[3:])
		if err != nil {
			return err
		}
		ro := len(more) > 0 && more[0] == "ro"
		_, err = node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: rest[0], StagingTargetPath: rest[1], TargetPath: rest[2], VolumeCapability: c, Readonly: ro})
		return err
	case op == "unpublish" && len(rest) == 2:
		_, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: rest[0], TargetPath: rest[1]})
		return err
	case op == "unstage" && len(rest) == 2:
		_, err := node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: rest[0], StagingTargetPath: rest[1]})
		return err
	}
	if done, err := controller(ctx, conn, op, rest); done {
		return err
	}
	return fmt.Errorf("bad arguments: %q", args[1:])
}

package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// The Controller calls, each mutating one made twice (a sidecar retries
// a call whose answer it did not get: the second must answer the same):
//
//	vmcsi ENDPOINT capacity [KEY=VALUE...]                  the bytes GetCapacity says, for the class's parameters
//	vmcsi ENDPOINT create NAME BYTES NODE [from=SNAPID] [KEY=VALUE...]
//	                                                        the volume ID, then its context (KEY=VALUE a line)
//	vmcsi ENDPOINT expand ID BYTES PATH                     ControllerExpandVolume, then NodeExpandVolume at PATH
//	vmcsi ENDPOINT snapshot NAME ID                         the snapshot ID and whether it is ready
//	vmcsi ENDPOINT delete ID
//	vmcsi ENDPOINT deletesnap ID
//
// done is false for an op that is not one of these.
func controller(ctx context.Context, conn *grpc.ClientConn, op string, rest []string) (bool, error) {
	c := csipb.NewControllerClient(conn)
	switch {
	case op == "capacity":
		params, err := keyValues(rest)
		if err != nil {
			return true, err
		}
		r, err := c.GetCapacity(ctx, &csipb.GetCapacityRequest{Parameters: params})
		if err == nil {
			fmt.Println(r.GetAvailableCapacity())
		}
		return true, err
	case op == "create" && len(rest) >= 3:
		return true, create(ctx, c, rest)
	case op == "expand" && len(rest) == 3:
		return true, expand(ctx, conn, rest)
	case op == "snapshot" && len(rest) == 2:
		var ids []string
		for range 2 {
			r, err := c.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: rest[0], SourceVolumeId: rest[1]})
			if err != nil {
				return true, err
			}
			ids = append(ids, r.GetSnapshot().GetSnapshotId())
			if !r.GetSnapshot().GetReadyToUse() {
				return true, fmt.Errorf("snapshot %s not ready", ids[0])
			}
		}
		fmt.Println(ids[0])
		return true, same(ids)
	case op == "delete" && len(rest) == 1:
		for range 2 {
			if _, err := c.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: rest[0]}); err != nil {
				return true, err
			}
		}
		return true, nil
	case op == "deletesnap" && len(rest) == 1:
		for range 2 {
			if _, err := c.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: rest[0]}); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	return false, nil
}

func keyValues(args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want KEY=VALUE", a)
		}
		out[k] = v
	}
	return out, nil
}

func same(ids []string) error {
	if ids[0] != ids[1] {
		return fmt.Errorf("the repeated call answered %s, the first %s", ids[1], ids[0])
	}
	return nil
}

// create asks for a mount volume with the external-provisioner's
// accessibility requirements under --strict-topology: NODE only.
func create(ctx context.Context, c csipb.ControllerClient, rest []string) error {
	size, err := strconv.ParseInt(rest[1], 10, 64)
	if err != nil {
		return err
	}
	params, err := keyValues(rest[3:])
	if err != nil {
		return err
	}
	node := &csipb.Topology{Segments: map[string]string{"topology.volumed.io/node": rest[2]}}
	req := &csipb.CreateVolumeRequest{Name: rest[0], CapacityRange: &csipb.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csipb.VolumeCapability{{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		AccessibilityRequirements: &csipb.TopologyRequirement{Requisite: []*csipb.Topology{node}, Preferred: []*csipb.Topology{node}}}
	if from, ok := params["from"]; ok {
		delete(params, "from")
		req.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: from}}}
	}
	req.Parameters = params
	var ids []string
	var vol *csipb.Volume
	for range 2 {
		r, err := c.CreateVolume(ctx, req)
		if err != nil {
			return err
		}
		vol = r.GetVolume()
		ids = append(ids, vol.GetVolumeId())
	}
	if err := same(ids); err != nil {
		return err
	}
	fmt.Println(vol.GetVolumeId())
	keys := make([]string, 0, len(vol.GetVolumeContext()))
	for k := range vol.GetVolumeContext() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%s=%s\n", k, vol.GetVolumeContext()[k])
	}
	return nil
}

// expand is the external-resizer's two calls: the controller's, then
// (node_expansion_required) the kubelet's at the volume's path.
func expand(ctx context.Context, conn *grpc.ClientConn, rest []string) error {
	size, err := strconv.ParseInt(rest[1], 10, 64)
	if err != nil {
		return err
	}
	rng := &csipb.CapacityRange{RequiredBytes: size}
	for range 2 {
		r, err := csipb.NewControllerClient(conn).ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: rest[0], CapacityRange: rng})
		if err != nil {
			return err
		}
		if !r.GetNodeExpansionRequired() {
			return fmt.Errorf("ControllerExpandVolume: node expansion not required")
		}
	}
	var got int64
	for range 2 {
		r, err := csipb.NewNodeClient(conn).NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: rest[0], VolumePath: rest[2], CapacityRange: rng})
		if err != nil {
			return err
		}
		got = r.GetCapacityBytes()
	}
	fmt.Println(got)
	return nil
}

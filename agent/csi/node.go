package csi

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// pollEvery is how often a call waiting on the reconciler looks again.
const pollEvery = 20 * time.Millisecond

// capability is what a VolumeCapability asks for.
type capability struct {
	block      bool
	fsType     string
	mountFlags []string
	mode       csipb.VolumeCapability_AccessMode_Mode
}

func parseCapability(c *csipb.VolumeCapability) (capability, error) {
	if c == nil {
		return capability{}, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	out := capability{mode: c.GetAccessMode().GetMode()}
	switch {
	case c.GetBlock() != nil:
		out.block = true
	case c.GetMount() != nil:
		out.fsType = c.GetMount().GetFsType()
		out.mountFlags = c.GetMount().GetMountFlags()
	default:
		return capability{}, status.Error(codes.InvalidArgument, "volume capability: access type block or mount is required")
	}
	switch out.mode {
	case csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:
		if !out.block {
			// A filesystem mounted on two hosts at once is corrupted.
			return capability{}, status.Errorf(codes.InvalidArgument, "access mode %s: a filesystem volume is never written from more than one node", out.mode)
		}
	case csipb.VolumeCapability_AccessMode_UNKNOWN:
		return capability{}, status.Error(codes.InvalidArgument, "volume capability: access mode is required")
	}
	return out, nil
}

func readOnlyMode(m csipb.VolumeCapability_AccessMode_Mode) bool {
	return m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY || m == csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// field is one request field a call requires: its name and value.
type field struct{ name, value string }

func required(fields ...field) error {
	for _, f := range fields {
		if f.value == "" {
			return status.Errorf(codes.InvalidArgument, "%s is required", f.name)
		}
	}
	return nil
}

// begin checks the fields a call requires, then claims the volume for
// it: the volumed name of the volume, and the release of the claim.
func (s *Service) begin(id string, fields ...field) (string, func(), error) {
	if err := required(append([]field{{"volume ID", id}}, fields...)...); err != nil {
		return "", nil, err
	}
	name := VolumeName(id)
	release, err := s.claim(name, id)
	if err != nil {
		return "", nil, err
	}
	return name, release, nil
}

func (s *Service) checkPath(field, p string) error {
	if r := manifest.CheckTarget(p, s.cfg.Manifest.StateDir); r != "" {
		return status.Errorf(codes.InvalidArgument, "%s %s: %s", field, p, r)
	}
	return nil
}

// NodeStageVolume attaches the volume, formats it if blank and mounts it
// at the staging path (a block volume is only attached).
func (s *Service) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	id, sp := req.GetVolumeId(), filepath.Clean(req.GetStagingTargetPath())
	name, release, err := s.begin(id, field{"staging target path", req.GetStagingTargetPath()})
	if err != nil {
		return nil, err
	}
	defer release()
	c, err := parseCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	if r := s.record(name); r != nil {
		if r.StagingPath != sp || r.Block != c.block || (!c.block && r.FSType != c.fsType) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is already staged at %s with another capability", id, r.StagingPath)
		}
		return &csipb.NodeStageVolumeResponse{}, s.waitStaged(ctx, name, r)
	}
	if err := s.checkPath("staging target path", sp); err != nil {
		return nil, err
	}
	promised, err := s.promisedSize(id)
	if err != nil {
		return nil, err
	}
	r := &Record{VolumeID: id, StagingPath: sp, Block: c.block, FSType: c.fsType, MountFlags: c.mountFlags, AccessMode: int32(c.mode), Context: map[string]string{},
		CapacityBytes: promised}
	for k, v := range req.GetVolumeContext() {
		r.Context[k] = v
	}
	files, err := s.recs.writeSecrets(name, req.GetSecrets())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "secrets: %v", err)
	}
	for k, p := range files {
		r.Context[k] = p
		r.Secrets = append(r.Secrets, strings.TrimSuffix(k, "File"))
	}
	slices.Sort(r.Secrets)
	d, err := desired(name, r, s.cfg.Manifest)
	switch {
	case err != nil:
		err = status.Error(codes.InvalidArgument, err.Error())
	case !s.cfg.AllowSuidDev && len(hostPrivileges(d)) > 0:
		err = status.Errorf(codes.InvalidArgument, "volume %s: the volume context asks for %s: a PV's author is not the host's owner, so volumed refuses it unless started with --csi-allow-suid-dev",
			id, strings.Join(hostPrivileges(d), " and "))
	default:
		if h := s.cfg.Agent.ClaimHolder(d.Kind, d.Caps.Claims, name); h != "" {
			err = status.Errorf(codes.FailedPrecondition, "volume %s: its source is already volume %s's", id, h)
		}
	}
	if err == nil {
		err = s.commit(name, r, d)
	}
	if err != nil {
		_ = s.recs.remove(name) // the secrets written above
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, s.waitStaged(ctx, name, r)
}

func (s *Service) waitStaged(ctx context.Context, name string, r *Record) error {
	return s.wait(ctx, name, r.VolumeID, stageOps, "", func(rec *store.Volume) bool {
		if rec == nil || rec.Attachment == nil {
			return false
		}
		return r.Block || (rec.Staging != nil && rec.Staging.Path == r.StagingPath)
	})
}

// NodeUnstageVolume unmounts the staging mount and detaches the device.
func (s *Service) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	id := req.GetVolumeId()
	name, release, err := s.begin(id, field{"staging target path", req.GetStagingTargetPath()})
	if err != nil {
		return nil, err
	}
	defer release()
	if s.record(name) != nil {
		if err := s.commit(name, nil, nil); err != nil {
			return nil, err
		}
	}
	return &csipb.NodeUnstageVolumeResponse{}, s.wait(ctx, name, id, unstageOps, "", func(rec *store.Volume) bool {
		return rec == nil || (rec.Attachment == nil && rec.Staging == nil && len(rec.Targets) == 0)
	})
}

// NodePublishVolume binds the staged volume (or the device node of a
// block volume) at the target.
func (s *Service) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id, tp := req.GetVolumeId(), filepath.Clean(req.GetTargetPath())
	name, release, err := s.begin(id, field{"target path", req.GetTargetPath()})
	if err != nil {
		return nil, err
	}
	defer release()
	c, err := parseCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	r := s.record(name)
	if r == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged on this node", id)
	}
	if sp := req.GetStagingTargetPath(); sp != "" && !r.Block && filepath.Clean(sp) != r.StagingPath {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s is staged at %s, not %s", id, r.StagingPath, sp)
	}
	if c.block != r.Block {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s was staged with another access type (block: %v)", id, r.Block)
	}
	ro := req.GetReadonly() || readOnlyMode(c.mode)
	if t, ok := r.target(tp); ok {
		if t.ReadOnly != ro {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is already published at %s with readonly %v", id, tp, t.ReadOnly)
		}
		return &csipb.NodePublishVolumeResponse{}, s.waitPublished(ctx, name, id, tp)
	}
	single := csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	if len(r.Targets) > 0 && (c.mode == single || csipb.VolumeCapability_AccessMode_Mode(r.AccessMode) == single) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is single-writer and already published at %s", id, r.Targets[0].Path)
	}
	if err := s.checkPath("target path", tp); err != nil {
		return nil, err
	}
	r.Targets = append(r.Targets, Target{Path: tp, ReadOnly: ro, Made: absent(tp)})
	d, err := desired(name, r, s.cfg.Manifest)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.commit(name, r, d); err != nil {
		return nil, err
	}
	return &csipb.NodePublishVolumeResponse{}, s.waitPublished(ctx, name, id, tp)
}

func (s *Service) waitPublished(ctx context.Context, name, id, tp string) error {
	return s.wait(ctx, name, id, publishOps, tp, func(rec *store.Volume) bool {
		return rec != nil && slices.ContainsFunc(rec.Targets, func(t store.MountRecord) bool { return t.Path == tp })
	})
}

// NodeUnpublishVolume unmounts the target and removes the directory
// volumed made there, as the CSI spec asks of what the plugin created.
// A target volumed has no record of publishing is answered OK (the call
// is idempotent) and left untouched: volumed never removes what it did
// not make.
func (s *Service) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id, tp := req.GetVolumeId(), filepath.Clean(req.GetTargetPath())
	name, release, err := s.begin(id, field{"target path", req.GetTargetPath()})
	if err != nil {
		return nil, err
	}
	defer release()
	var made, block bool
	if r := s.record(name); r != nil {
		block = r.Block
		if t, ok := r.target(tp); ok {
			made = t.Made && s.checkPath("target path", tp) == nil
			r.Targets = slices.DeleteFunc(r.Targets, func(t Target) bool { return t.Path == tp })
			d, err := desired(name, r, s.cfg.Manifest)
			if err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			if err := s.commit(name, r, d); err != nil {
				return nil, err
			}
		}
	}
	// Waited for even when no record names the target: a retry after a
	// call that timed out must still see the unmount through.
	err = s.wait(ctx, name, id, unpublishOps, tp, func(rec *store.Volume) bool {
		return rec == nil || !slices.ContainsFunc(rec.Targets, func(t store.MountRecord) bool { return t.Path == tp })
	})
	if err != nil {
		return nil, err
	}
	if made {
		if err := removeMadeTarget(tp, block); err != nil {
			return nil, status.Errorf(codes.Internal, "%v", err)
		}
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// Operations whose failure a waiting call reports.
var (
	stageOps     = []string{agent.OpAttach, agent.OpFormat, agent.OpMountDevice, agent.OpRemount}
	unstageOps   = []string{agent.OpUnpublish, agent.OpUnmountDevice, agent.OpDetach}
	publishOps   = []string{agent.OpPublish, agent.OpAttach, agent.OpMountDevice}
	unpublishOps = []string{agent.OpUnpublish}
	growOps      = []string{agent.OpGrow}
)

// blocking are the conditions that keep a stage from ever finishing
// until someone acts: the call fails with them rather than time out.
var blocking = []string{agent.CondFormatRefused, agent.CondMountConfig, agent.CondIdentityChanged}

// wait polls the agent until done says the volume's record is there, or
// an operation of ops failed (about path, when set), or ctx ends.
func (s *Service) wait(ctx context.Context, name, id string, ops []string, path string, done func(*store.Volume) bool) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		v, ok := s.cfg.Agent.View(name)
		if ok {
			if done(v.Record) {
				return nil
			}
			if f := v.Failure; f != nil && slices.Contains(ops, f.Op) && (path == "" || strings.Contains(f.Err.Error(), path)) {
				code := codes.Internal
				if errors.Is(f.Err, agent.ErrBusy) || errors.Is(f.Err, agent.ErrNotEmpty) {
					code = codes.FailedPrecondition
				}
				return status.Errorf(code, "volume %s: %s failed: %v", id, f.Op, f.Err)
			}
			if slices.Contains(ops, agent.OpMountDevice) {
				for _, c := range v.Conditions {
					if slices.Contains(blocking, c.Type) {
						return status.Errorf(codes.FailedPrecondition, "volume %s: %s: %s", id, c.Reason, c.Message)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return status.Errorf(status.FromContextError(ctx.Err()).Code(), "volume %s: still in progress: %v", id, ctx.Err())
		case <-t.C:
		}
	}
}

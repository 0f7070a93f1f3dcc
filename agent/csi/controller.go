package csi

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/crashpoint"
)

// defaultVolumeSize is the size of a volume whose request names none.
const defaultVolumeSize = 1 << 30

// paramBackend is the StorageClass parameter choosing the backend; the
// others are the volume's manifest fields, as a static PV's context.
const paramBackend = "backend"

// CreateVolume promises a volume of a backend's pool: the record is kept
// durably before the answer, and the volume's image or LV is made at
// first stage by the loop or lvm kind's attach (loop.create.size, the lvm
// kind's create), under the agent's own intent record, so one code path
// makes every image and LV and a crash in between leaves only a record,
// which a retried call answers from. A volume restored from a snapshot
// is made here, after the record: its bytes are the snapshot's.
func (s *Service) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	want, backend, err := s.volumeRequest(req)
	if err != nil {
		return nil, err
	}
	size, err := decide.VolumeSize(want.Required, want.Limit, defaultVolumeSize)
	if err != nil {
		return nil, status.Error(codes.OutOfRange, err.Error())
	}
	key := volumeKey(want.Name)
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if p := s.provisioned[key]; p != nil {
		if why := decide.SameVolume(p.Request, p.SizeBytes, want); why != "" {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q: %s", want.Name, why)
		}
		return s.restored(ctx, p)
	}
	p, err := s.newProvisioned(ctx, backend, want, key, size)
	if err != nil {
		return nil, err
	}
	avail, pool, err := s.capacityOf(ctx, p)
	if err != nil {
		return nil, err
	}
	if size > avail {
		return nil, status.Errorf(codes.ResourceExhausted, "volume %q: %d bytes asked, %s can promise %d", want.Name, size, pool, avail)
	}
	if err := s.prov.put(key, p); err != nil {
		return nil, status.Errorf(codes.Internal, "keep the volume durably: %v", err)
	}
	crashpoint.HitFor("create_volume", "after-record", VolumeName(p.VolumeID))
	s.provisioned[key] = p
	s.cfg.Log.Info("csi volume provisioned", "volumeID", p.VolumeID, "image", p.Image, "lv", p.LV, "bytes", size, "snapshot", want.Source)
	return s.restored(ctx, p)
}

// newProvisioned is the record a CreateVolume of backend makes, checked.
func (s *Service) newProvisioned(ctx context.Context, backend string, want decide.VolumeRequest, key string, size int64) (*Provisioned, error) {
	p := &Provisioned{Request: want, Backend: backend, VolumeID: provisionedID(backend, s.cfg.NodeID, key), SizeBytes: size}
	if backend == BackendLVM {
		c, err := s.lvmClass(want.Params)
		if err != nil {
			return nil, err
		}
		p.Class, p.LV = &c, lvName(lvPrefix, key)
		p.Context = lvmContext(want.Params, p)
	} else {
		p.Image = s.pool.image(key)
		p.Context = provisionedContext(want.Params, p)
	}
	if err := s.checkSource(p); err != nil {
		return nil, err
	}
	return p, s.checkProvisioned(ctx, p)
}

// checkSource refuses a restore from a snapshot this node did not take,
// that is larger than the volume, or of another backend or pool.
func (s *Service) checkSource(p *Provisioned) error {
	if p.Request.Source == "" {
		return nil
	}
	_, sn := s.snapshotByID(p.Request.Source)
	switch {
	case sn == nil:
		return status.Errorf(codes.NotFound, "snapshot %s: not taken by this node", p.Request.Source)
	case p.SizeBytes < sn.SizeBytes:
		return status.Errorf(codes.OutOfRange, "volume %q: %d bytes, less than its snapshot's %d", p.Request.Name, p.SizeBytes, sn.SizeBytes)
	case sn.backend() != p.Backend:
		return status.Errorf(codes.InvalidArgument, "snapshot %s is the %s backend's: restore it with a class of backend %s", sn.SnapshotID, sn.backend(), sn.backend())
	case p.Class != nil && (p.Class.Type != "thin" || p.Class.VG != sn.VG || p.Class.Pool != sn.Pool):
		return status.Errorf(codes.InvalidArgument, "snapshot %s is a thin snapshot in pool %s/%s: restore it with a class of type thin in that pool (parameters volumeGroup, thinPool)", sn.SnapshotID, sn.VG, sn.Pool)
	}
	return nil
}

// restored answers a volume, making the image or LV of one restored from
// a snapshot first (at create: its bytes are the snapshot's, which the
// kind's attach cannot know), again after a crash cut it short.
// Call with pmu held.
func (s *Service) restored(ctx context.Context, p *Provisioned) (*csipb.CreateVolumeResponse, error) {
	if p.Request.Source == "" {
		return &csipb.CreateVolumeResponse{Volume: s.volumeOf(p)}, nil
	}
	made, err := s.exists(ctx, p)
	if err != nil || made {
		return &csipb.CreateVolumeResponse{Volume: s.volumeOf(p)}, err
	}
	_, sn := s.snapshotByID(p.Request.Source)
	switch {
	case sn == nil:
		return nil, status.Errorf(codes.NotFound, "snapshot %s: deleted before volume %s was restored from it", p.Request.Source, p.VolumeID)
	case !s.snapshotReady(ctx, sn):
		// Never an empty volume in place of the snapshot's bytes.
		return nil, status.Errorf(codes.FailedPrecondition, "snapshot %s is not ready (its copy is not made: retry CreateSnapshot)", sn.SnapshotID)
	case p.Class != nil:
		err = s.cfg.LVM.Snapshot(ctx, p.Class.VG, sn.LV, p.LV, VolumeName(p.VolumeID))
	default:
		err = cloneFile(sn.File, p.Image, p.SizeBytes)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "restore volume %s: %v", p.VolumeID, err)
	}
	return &csipb.CreateVolumeResponse{Volume: s.volumeOf(p)}, nil
}

// contentSource is the snapshot a CreateVolume restores ("": none).
func (s *Service) contentSource(src *csipb.VolumeContentSource) (string, error) {
	switch {
	case src == nil:
		return "", nil
	case src.GetSnapshot() != nil && s.snapshotsServed():
		return src.GetSnapshot().GetSnapshotId(), nil
	case src.GetSnapshot() != nil:
		return "", status.Errorf(codes.InvalidArgument, "volume content source: the loop pool %s cannot reflink (snapshots need xfs with reflink or btrfs)", s.pool.dir)
	}
	return "", status.Error(codes.InvalidArgument, "volume content source: volumed clones no volume (take a snapshot and restore it)")
}

// volumeRequest checks a CreateVolume call and says what it asks, and
// of which backend.
func (s *Service) volumeRequest(req *csipb.CreateVolumeRequest) (decide.VolumeRequest, string, error) {
	if err := required(field{"name", req.GetName()}); err != nil {
		return decide.VolumeRequest{}, "", err
	}
	block, err := provisionedAccess(req.GetVolumeCapabilities())
	if err != nil {
		return decide.VolumeRequest{}, "", err
	}
	source, err := s.contentSource(req.GetVolumeContentSource())
	if err != nil {
		return decide.VolumeRequest{}, "", err
	}
	backend, err := s.backendOf(req.GetParameters(), true)
	if err != nil {
		return decide.VolumeRequest{}, "", err
	}
	if err := s.reachable(req.GetAccessibilityRequirements()); err != nil {
		return decide.VolumeRequest{}, "", err
	}
	params := maps.Clone(req.GetParameters())
	delete(params, paramBackend)
	return decide.VolumeRequest{Name: req.GetName(), Required: req.GetCapacityRange().GetRequiredBytes(),
		Limit: req.GetCapacityRange().GetLimitBytes(), Params: params, Block: block, Source: source}, backend, nil
}

// provisionedAccess checks the capabilities a volume is created for and
// says whether it is a raw block volume. An image on this node's disks
// is reachable from this node only, and one volume is either block or
// a filesystem.
func provisionedAccess(caps []*csipb.VolumeCapability) (bool, error) {
	if len(caps) == 0 {
		return false, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	var block, mount bool
	for _, c := range caps {
		pc, err := parseCapability(c)
		if err != nil {
			return false, err
		}
		if !localMode(pc.mode) {
			return false, status.Errorf(codes.InvalidArgument, "access mode %s: a volume on this node's disks is reachable from this node only", pc.mode)
		}
		block, mount = block || pc.block, mount || !pc.block
	}
	if block && mount {
		return false, status.Error(codes.InvalidArgument, "volume capabilities: both block and mount access asked of one volume")
	}
	return block, nil
}

func localMode(m csipb.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

// provisionedContext is the volume context of a provisioned volume: the
// StorageClass's parameters (less the backend) and the image the loop
// kind makes at first stage.
func provisionedContext(params map[string]string, p *Provisioned) map[string]string {
	ctx := maps.Clone(params)
	if ctx == nil {
		ctx = map[string]string{}
	}
	ctx["loop.file"] = p.Image
	ctx["loop.create.size"] = strconv.FormatInt(p.SizeBytes, 10)
	return ctx
}

// checkProvisioned reads the volume the promise makes as its first stage
// will (the same translation and the kinds' checks), so a bad parameter
// fails CreateVolume, naming the field, rather than the pod's start; and
// refuses an image path a file already holds, or an LV name an LV has:
// bytes no record accounts for are never taken over as a new volume's.
func (s *Service) checkProvisioned(ctx context.Context, p *Provisioned) error {
	d, err := provisionedDesired(p, "", s.cfg.Manifest)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if !s.cfg.AllowSuidDev && len(hostPrivileges(d)) > 0 {
		return status.Errorf(codes.InvalidArgument, "parameters ask for %s: refused unless volumed runs with --csi-allow-suid-dev", strings.Join(hostPrivileges(d), " and "))
	}
	if p.Class != nil {
		return s.lvmFree(ctx, p)
	}
	there, err := exists(p.Image)
	switch {
	case err != nil:
		return status.Errorf(codes.Internal, "image %s: %v", p.Image, err)
	case there:
		return status.Errorf(codes.FailedPrecondition, "image %s: a file is already there that no provisioned volume's record accounts for; volumed does not take it over (move it away)", p.Image)
	}
	return nil
}

// volumeOf is the CSI volume a record promised.
func (s *Service) volumeOf(p *Provisioned) *csipb.Volume {
	v := &csipb.Volume{
		VolumeId:           p.VolumeID,
		CapacityBytes:      p.SizeBytes,
		VolumeContext:      maps.Clone(p.Context),
		AccessibleTopology: []*csipb.Topology{{Segments: map[string]string{TopologyKey: s.cfg.NodeID}}},
	}
	if p.Request.Source != "" {
		v.ContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: p.Request.Source}}}
	}
	return v
}

// stageContext is the volume context a stage will see, as far as the
// controller can know it. An encrypting class that lists no key gets it
// from the stage secret (encryption.luks2.key), which only the stage
// sees (the external-provisioner keeps its csi.storage.k8s.io/ secret
// parameters to itself): a file stands in for it here, and a stage
// without that secret fails naming the missing keys.
func stageContext(p *Provisioned) map[string]string {
	encrypts := false
	for k := range p.Request.Params {
		encrypts = encrypts || strings.HasPrefix(k, "encryption.")
	}
	if _, listed := p.Request.Params["encryption.luks2.keys"]; !encrypts || listed {
		return p.Context
	}
	ctx := maps.Clone(p.Context)
	ctx[secretKeyFile] = "/secrets/encryption.luks2.key"
	return ctx
}

// reachable refuses accessibility requirements this node does not meet
// (decide.Reachable).
func (s *Service) reachable(req *csipb.TopologyRequirement) error {
	var requisite []map[string]string
	for _, t := range req.GetRequisite() {
		requisite = append(requisite, t.GetSegments())
	}
	if !decide.Reachable(TopologyKey, s.cfg.NodeID, requisite) {
		return status.Errorf(codes.ResourceExhausted, "accessibility requirements: no requisite topology is this node's (%s=%s)", TopologyKey, s.cfg.NodeID)
	}
	return nil
}

// provisionedDesired is the volume a promise makes at its first stage
// (fsType: the capability's), or why the parameters make none.
func provisionedDesired(p *Provisioned, fsType string, opts manifest.Options) (*agent.Desired, error) {
	for k := range p.Request.Params {
		if strings.HasPrefix(k, BackendLoop+".") || strings.HasPrefix(k, BackendLVM+".") {
			return nil, fmt.Errorf("parameters.%s: the backend sets its image's or LV's fields, not a StorageClass", k)
		}
	}
	return desired(VolumeName(p.VolumeID), &Record{VolumeID: p.VolumeID, Context: stageContext(p), Block: p.Request.Block, FSType: fsType}, opts)
}

// CheckParameters reports whether a StorageClass's parameters provision
// a volume, as CreateVolume and the first stage would read them: for the
// checks of the shipped classes (an lvm class's VG is taken as one the
// node serves). The csi.storage.k8s.io/ parameters are the
// external-provisioner's (fstype becomes the capability's).
func CheckParameters(params map[string]string, opts manifest.Options) error {
	backend := params[paramBackend]
	p := &Provisioned{Backend: backend, VolumeID: provisionedID(backend, "node", "check"), SizeBytes: defaultVolumeSize,
		Request: decide.VolumeRequest{Params: map[string]string{}}}
	fsType := ""
	for k, v := range params {
		switch {
		case k == "csi.storage.k8s.io/fstype":
			fsType = v
		case k != paramBackend && !strings.HasPrefix(k, "csi.storage.k8s.io/"):
			p.Request.Params[k] = v
		}
	}
	switch backend {
	case BackendLoop:
		p.Image = "/var/lib/volumed/pool/check.img"
		p.Context = provisionedContext(p.Request.Params, p)
	case BackendLVM:
		c, err := decide.LVMParams(p.Request.Params, []string{params[decide.ParamVolumeGroup]})
		if err != nil {
			return err
		}
		p.Class, p.LV = &c, lvName(lvPrefix, "check")
		p.Context = lvmContext(p.Request.Params, p)
	default:
		return fmt.Errorf("parameters.%s: must be %q or %q, got %q", paramBackend, BackendLoop, BackendLVM, backend)
	}
	_, err := provisionedDesired(p, fsType, opts)
	return err
}

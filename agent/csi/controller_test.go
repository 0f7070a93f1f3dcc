package csi

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/internal/testns"
)

// The pool of TestCapacityLessPromises is a tmpfs of its own, mounted in
// a private mount namespace.
func TestMain(m *testing.M) { testns.Main(m) }

// controller is a Service with a loop pool under a temp dir and no
// agent: the calls tested here never reach it.
func controller(t *testing.T, dir string) *Service {
	t.Helper()
	s := &Service{cfg: Config{NodeID: "n1", Dir: filepath.Join(dir, "csi"), Manifest: opts(), Log: slog.New(slog.DiscardHandler),
		LoopPool: filepath.Join(dir, "pool")}}
	if err := s.loadProvisioned(); err != nil {
		t.Fatal(err)
	}
	return s
}

func createReq(name string, size int64, params map[string]string) *csipb.CreateVolumeRequest {
	return &csipb.CreateVolumeRequest{Name: name, CapacityRange: &csipb.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csipb.VolumeCapability{mountCapability(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		Parameters:         params}
}

func mountCapability(m csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: m}}
}

func capacity(t *testing.T, s *Service) int64 {
	t.Helper()
	r, err := s.GetCapacity(context.Background(), &csipb.GetCapacityRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetAvailableCapacity()
}

func TestCreateVolumeIsKeptAndRepeatable(t *testing.T) {
	dir := t.TempDir()
	s := controller(t, dir)
	ctx := context.Background()
	loop := map[string]string{"backend": "loop", "filesystem.type": "xfs"}
	v, err := s.CreateVolume(ctx, createReq("pvc-1", 100<<20, loop))
	if err != nil {
		t.Fatal(err)
	}
	vol := v.GetVolume()
	if vol.GetVolumeId() != "loop/n1/pvc-1" || vol.GetCapacityBytes() != 100<<20 ||
		vol.GetAccessibleTopology()[0].GetSegments()[TopologyKey] != "n1" {
		t.Errorf("volume: %v", vol)
	}
	c := vol.GetVolumeContext()
	if c["loop.file"] != filepath.Join(dir, "pool", "pvc-1.img") || c["loop.create.size"] != "104857600" || c["filesystem.type"] != "xfs" || c["backend"] != "" {
		t.Errorf("context: %v", c)
	}
	if _, err := os.Stat(c["loop.file"]); !os.IsNotExist(err) {
		t.Errorf("the image is made at first stage, not at create: %v", err)
	}

	// A restarted agent answers the same name with the same volume, from
	// the record alone.
	s = controller(t, dir)
	again, err := s.CreateVolume(ctx, createReq("pvc-1", 100<<20, loop))
	if err != nil || again.GetVolume().GetVolumeId() != vol.GetVolumeId() {
		t.Fatalf("repeated: %v, %v", again, err)
	}
	for name, req := range map[string]*csipb.CreateVolumeRequest{
		"larger":          createReq("pvc-1", 200<<20, loop),
		"other parameter": createReq("pvc-1", 100<<20, map[string]string{"backend": "loop", "filesystem.type": "ext4"}),
	} {
		if _, err := s.CreateVolume(ctx, req); status.Code(err) != codes.AlreadyExists {
			t.Errorf("%s: %v, want AlreadyExists", name, err)
		}
	}
}

func TestCapacityLessPromises(t *testing.T) {
	// The pool on a filesystem of its own: on the temp dir's, others
	// write and delete meanwhile (a run where 56 KiB were freed between
	// the two answers failed a margin that allowed only writes).
	dir := t.TempDir()
	pool := filepath.Join(dir, "pool")
	if err := os.Mkdir(pool, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", pool, "tmpfs", 0, "size=1g"); err != nil {
		t.Fatalf("a tmpfs for the pool: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(pool, syscall.MNT_DETACH) })
	s := controller(t, dir)
	ctx := context.Background()
	before := capacity(t, s)
	if _, err := s.CreateVolume(ctx, createReq("a", 64<<20, map[string]string{"backend": "loop"})); err != nil {
		t.Fatal(err)
	}
	if after := capacity(t, s); before-after != 64<<20 {
		t.Errorf("capacity %d before, %d after a 64 MiB promise", before, after)
	}
	if _, err := s.CreateVolume(ctx, createReq("huge", before*2, map[string]string{"backend": "loop"})); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a volume over the capacity: %v, want ResourceExhausted", err)
	}
	r, err := s.GetCapacity(ctx, &csipb.GetCapacityRequest{AccessibleTopology: &csipb.Topology{Segments: map[string]string{TopologyKey: "n2"}}})
	if err != nil || r.GetAvailableCapacity() != 0 {
		t.Errorf("another node's capacity: %v, %v", r, err)
	}
}

func TestCreateVolumeRefusesBadRequests(t *testing.T) {
	dir := t.TempDir()
	s := controller(t, dir)
	multi := createReq("m", 1<<20, map[string]string{"backend": "loop"})
	multi.VolumeCapabilities = []*csipb.VolumeCapability{{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}}
	elsewhere := createReq("e", 1<<20, map[string]string{"backend": "loop"})
	elsewhere.AccessibilityRequirements = &csipb.TopologyRequirement{Requisite: []*csipb.Topology{{Segments: map[string]string{TopologyKey: "n2"}}}}
	if err := os.WriteFile(filepath.Join(dir, "pool", "taken.img"), []byte("someone's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		req  *csipb.CreateVolumeRequest
		code codes.Code
		msg  string
	}{
		{"no backend", createReq("x", 1<<20, nil), codes.InvalidArgument, "parameters.backend"},
		{"unknown backend", createReq("x", 1<<20, map[string]string{"backend": "zfs"}), codes.InvalidArgument, "parameters.backend"},
		{"a misspelt field", createReq("x", 1<<20, map[string]string{"backend": "loop", "filesystem.tpye": "xfs"}), codes.InvalidArgument, "filesystem.tpye"},
		{"the image's own field", createReq("x", 1<<20, map[string]string{"backend": "loop", "loop.file": "/etc/passwd"}), codes.InvalidArgument, "parameters.loop.file"},
		{"a misspelt encryption field", createReq("x", 1<<20, map[string]string{"backend": "loop", "encryption.luks2.cihper": "aes-xts-plain64"}), codes.InvalidArgument, "encryption.luks2.cihper"},
		{"setuid", createReq("x", 1<<20, map[string]string{"backend": "loop", "filesystem.allowSuid": "true"}), codes.InvalidArgument, "--csi-allow-suid-dev"},
		{"multi-node", multi, codes.InvalidArgument, "this node only"},
		{"another node's topology", elsewhere, codes.ResourceExhausted, "n1"},
		{"a file no record accounts for", createReq("taken", 1<<20, map[string]string{"backend": "loop"}), codes.FailedPrecondition, "taken.img"},
	} {
		_, err := s.CreateVolume(context.Background(), c.req)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want %s naming %q", c.name, err, c.code, c.msg)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "pool", "taken.img")); string(got) != "someone's" {
		t.Errorf("the file found at the image's path was touched: %q", got)
	}
	if len(s.provisioned) != 0 {
		t.Errorf("a refused call left a promise: %v", s.provisioned)
	}
}

// An encrypting class whose key comes in the stage secret is checked
// with that key standing in; the answered context does not name it.
func TestCreateVolumeEncryptedByStageSecret(t *testing.T) {
	s := controller(t, t.TempDir())
	v, err := s.CreateVolume(context.Background(), createReq("enc", 1<<20, map[string]string{"backend": "loop",
		"encryption.luks2.cipher": "aes-xts-plain64"}))
	if err != nil {
		t.Fatal(err)
	}
	if c := v.GetVolume().GetVolumeContext(); c["encryption.luks2.cipher"] != "aes-xts-plain64" || c[secretKeyFile] != "" {
		t.Errorf("context: %v", c)
	}
}

func TestListVolumesPages(t *testing.T) {
	s := controller(t, t.TempDir())
	ctx := context.Background()
	for _, n := range []string{"c", "a", "b"} {
		if _, err := s.CreateVolume(ctx, createReq(n, 1<<20, map[string]string{"backend": "loop"})); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	token := ""
	for range 3 {
		r, err := s.ListVolumes(ctx, &csipb.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.GetEntries() {
			got = append(got, e.GetVolume().GetVolumeId())
		}
		if token = r.GetNextToken(); token == "" {
			break
		}
	}
	if strings.Join(got, " ") != "loop/n1/a loop/n1/b loop/n1/c" {
		t.Errorf("listed %v", got)
	}
	if _, err := s.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: "invalid-token"}); status.Code(err) != codes.Aborted {
		t.Errorf("a token never given: %v, want Aborted", err)
	}
}

func TestControllerExpandRaisesThePromise(t *testing.T) {
	dir := t.TempDir()
	s := controller(t, dir)
	ctx := context.Background()
	v, err := s.CreateVolume(ctx, createReq("g", 64<<20, map[string]string{"backend": "loop"}))
	if err != nil {
		t.Fatal(err)
	}
	id := v.GetVolume().GetVolumeId()
	r, err := s.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 96 << 20}})
	if err != nil || r.GetCapacityBytes() != 96<<20 || !r.GetNodeExpansionRequired() {
		t.Fatalf("expand: %v, %v", r, err)
	}
	// Kept: a restart still promises the new size, and a stage (the PV's
	// context still says 64 MiB) grows the image to it.
	s = controller(t, dir)
	if n, err := s.promisedSize(id); err != nil || n != 96<<20 {
		t.Errorf("promised after restart: %d, %v", n, err)
	}
	if _, err := s.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "loop/n1/nope", CapacityRange: &csipb.CapacityRange{RequiredBytes: 1}}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown volume: %v, want NotFound", err)
	}
	// Another node's volume: its node keeps the promise at its
	// NodeExpandVolume; this one answers as asked and keeps nothing.
	other, err := s.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "loop/n2/g", CapacityRange: &csipb.CapacityRange{RequiredBytes: 128 << 20}})
	if err != nil || other.GetCapacityBytes() != 128<<20 || !other.GetNodeExpansionRequired() {
		t.Errorf("another node's volume: %v, %v", other, err)
	}
	if n, _ := s.promisedSize(id); n != 96<<20 || len(s.provisioned) != 1 {
		t.Errorf("another node's expansion changed this node's promises: %d, %v", n, s.provisioned)
	}
	// NodeExpandVolume's side raises the promise too.
	if err := s.nodeExpandPromise(context.Background(), id, 128<<20); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.promisedSize(id); n != 128<<20 {
		t.Errorf("after the node's expansion: promised %d", n)
	}
}

func TestProvisionedID(t *testing.T) {
	for _, c := range []struct {
		id, backend, node, key string
		ok                     bool
	}{
		{"loop/n1/pvc-1", "loop", "n1", "pvc-1", true},
		{"loop/a/b/k", "loop", "a/b", "k", true},
		{"pv-static", "", "", "", false},
		{"loop//k", "", "", "", false},
		{"loop/n1/", "", "", "", false},
		{"/n1/k", "", "", "", false},
	} {
		b, n, k, ok := parseProvisionedID(c.id)
		if b != c.backend || n != c.node || k != c.key || ok != c.ok {
			t.Errorf("%q: %q %q %q %v", c.id, b, n, k, ok)
		}
	}
	if k := volumeKey("Sanity/Name"); !strings.HasPrefix(k, "v-") || volumeKey("Sanity/Name") != k || volumeKey("pvc-1") != "pvc-1" {
		t.Errorf("keys: %q", k)
	}
}

// On a filesystem that cannot reflink (a tmpfs: /dev/shm, so the case
// runs whatever filesystem holds the temp dir) no snapshot is served, and
// a restore says why.
func TestNoSnapshotsWithoutReflink(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "volumed-pool-")
	if err != nil {
		t.Fatalf("a pool on tmpfs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := controller(t, dir)
	if s.pool.reflinks() {
		t.Fatalf("the pool on tmpfs %s says it can reflink", dir)
	}
	caps, err := s.ControllerGetCapabilities(context.Background(), &csipb.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps.GetCapabilities() {
		if strings.Contains(c.GetRpc().GetType().String(), "SNAPSHOT") {
			t.Errorf("capability %s on a pool that cannot reflink", c.GetRpc().GetType())
		}
	}
	req := createReq("r", 1<<20, map[string]string{"backend": "loop"})
	req.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snap/n1/s"}}}
	if _, err := s.CreateVolume(context.Background(), req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reflink") {
		t.Errorf("restore on a pool that cannot reflink: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "pool", "*")); len(left) > 0 {
		t.Errorf("the reflink probe left %v", left)
	}
}

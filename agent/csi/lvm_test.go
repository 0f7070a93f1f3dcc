package csi

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeLVM is a VG in memory behind the LVM port: this host has no
// device-mapper (test/os's TestLVMThin drives the real one).
type fakeLVM struct {
	groups map[string]*LVMGroup
	calls  []string
}

func (f *fakeLVM) Group(_ context.Context, vg string) (LVMGroup, error) {
	if g := f.groups[vg]; g != nil {
		c := *g
		c.LVs = append([]LVMVolume(nil), g.LVs...)
		return c, nil
	}
	return LVMGroup{}, nil
}

func (f *fakeLVM) Snapshot(_ context.Context, vg, from, name, volume string) error {
	f.calls = append(f.calls, fmt.Sprintf("snapshot %s/%s %s %s", vg, from, name, volume))
	g := f.groups[vg]
	if _, ok := g.lv(name); ok {
		return nil
	}
	lv, ok := g.lv(from)
	if !ok {
		return fmt.Errorf("no LV %s", from)
	}
	lv.Name, lv.Owner, lv.Snapshot, lv.Open = name, volume, "", false
	if volume == "" {
		lv.Snapshot = name
	}
	g.LVs = append(g.LVs, lv)
	return nil
}

func (f *fakeLVM) Remove(_ context.Context, vg, name, volume string) error {
	f.calls = append(f.calls, fmt.Sprintf("remove %s/%s %s", vg, name, volume))
	return nil
}

// made stands for the lvm kind's first stage: the LV is there.
func (f *fakeLVM) made(vg string, lv LVMVolume) {
	g := f.groups[vg]
	g.LVs = append(g.LVs, lv)
	if !lv.Thin {
		g.Free -= lv.Size
	}
}

const mi = 1 << 20

func lvmController(t *testing.T, dir string, f *fakeLVM) *Service {
	t.Helper()
	s := &Service{cfg: Config{NodeID: "n1", Dir: filepath.Join(dir, "csi"), Manifest: opts(), Log: slog.New(slog.DiscardHandler),
		LVMGroups: []string{"vg0"}, LVM: f}}
	if err := s.loadProvisioned(); err != nil {
		t.Fatal(err)
	}
	return s
}

func newFake() *fakeLVM {
	return &fakeLVM{groups: map[string]*LVMGroup{"vg0": {Found: true, Free: 500 * mi, LVs: []LVMVolume{
		{Name: "pool", Size: 200 * mi, ThinPool: true, DataPercent: 25},
		{Name: "root", Size: 64 * mi, Open: true},
	}}}}
}

func lvmCapacity(t *testing.T, s *Service, params map[string]string) int64 {
	t.Helper()
	r, err := s.GetCapacity(context.Background(), &csipb.GetCapacityRequest{Parameters: params})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetAvailableCapacity()
}

func TestLVMCreateVolume(t *testing.T) {
	dir, f := t.TempDir(), newFake()
	s := lvmController(t, dir, f)
	ctx := context.Background()
	linear := map[string]string{"backend": "lvm", "volumeGroup": "vg0", "filesystem.type": "xfs"}
	if c := lvmCapacity(t, s, linear); c != 500*mi {
		t.Errorf("capacity before: %d, want the VG's free 500 MiB", c)
	}
	v, err := s.CreateVolume(ctx, createReq("pvc-1", 100*mi, linear))
	if err != nil {
		t.Fatal(err)
	}
	vol := v.GetVolume()
	c := vol.GetVolumeContext()
	if vol.GetVolumeId() != "lvm/n1/pvc-1" || c["lvm.volumeGroup"] != "vg0" || c["lvm.name"] != "csi-pvc-1" || c["lvm.size"] != "104857600" ||
		c["lvm.type"] != "linear" || c["filesystem.type"] != "xfs" || c["volumeGroup"] != "" || c["backend"] != "" {
		t.Errorf("volume %s, context %v", vol.GetVolumeId(), c)
	}
	if len(f.calls) != 0 {
		t.Errorf("the LV is made at first stage, not at create: %v", f.calls)
	}
	if c := lvmCapacity(t, s, linear); c != 400*mi {
		t.Errorf("capacity with the LV promised, not made: %d, want 400 MiB", c)
	}
	f.made("vg0", LVMVolume{Name: "csi-pvc-1", Size: 100 * mi, Owner: VolumeName("lvm/n1/pvc-1")})
	if c := lvmCapacity(t, s, linear); c != 400*mi {
		t.Errorf("capacity with the LV made: %d, want 400 MiB (counted once)", c)
	}
	// A restarted agent answers the same name from the record alone.
	s = lvmController(t, dir, f)
	again, err := s.CreateVolume(ctx, createReq("pvc-1", 100*mi, linear))
	if err != nil || again.GetVolume().GetVolumeId() != vol.GetVolumeId() {
		t.Fatalf("repeated: %v, %v", again, err)
	}
	if _, err := s.CreateVolume(ctx, createReq("big", 401*mi, linear)); status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "volume group vg0 can promise 419430400") {
		t.Errorf("over the VG's free space: %v", err)
	}
	// An expansion is promised until the node grows the LV.
	if _, err := s.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: vol.GetVolumeId(), CapacityRange: &csipb.CapacityRange{RequiredBytes: 150 * mi}}); err != nil {
		t.Fatal(err)
	}
	if c := lvmCapacity(t, s, linear); c != 350*mi {
		t.Errorf("capacity after a controller expansion: %d, want 350 MiB", c)
	}
	if r, err := s.ListVolumes(ctx, &csipb.ListVolumesRequest{MaxEntries: 1, StartingToken: ""}); err != nil || len(r.GetEntries()) != 1 {
		t.Errorf("ListVolumes: %v, %v", r, err)
	}
	if _, err := s.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: "lvm/n1/pvc-0"}); err != nil {
		t.Errorf("a token of an lvm volume: %v", err)
	}
}

func TestLVMCreateVolumeRefuses(t *testing.T) {
	s := lvmController(t, t.TempDir(), newFake())
	ctx := context.Background()
	for name, c := range map[string]struct {
		params map[string]string
		code   codes.Code
		msg    string
	}{
		"no VG":                {map[string]string{"backend": "lvm"}, codes.InvalidArgument, "parameters.volumeGroup: required"},
		"a VG not served":      {map[string]string{"backend": "lvm", "volumeGroup": "vgroot"}, codes.InvalidArgument, "parameters.volumeGroup"},
		"thin without a pool":  {map[string]string{"backend": "lvm", "volumeGroup": "vg0", "type": "thin"}, codes.InvalidArgument, "parameters.thinPool"},
		"the LV's own fields":  {map[string]string{"backend": "lvm", "volumeGroup": "vg0", "lvm.name": "root"}, codes.InvalidArgument, "parameters.lvm.name"},
		"a backend not served": {map[string]string{"backend": "loop"}, codes.InvalidArgument, "parameters.backend"},
		"a bad manifest field": {map[string]string{"backend": "lvm", "volumeGroup": "vg0", "filesystem.type": "fat"}, codes.InvalidArgument, "filesystem"},
	} {
		_, err := s.CreateVolume(ctx, createReq("pvc-x", 10*mi, c.params))
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want %s naming %q", name, err, c.code, c.msg)
		}
	}
	// An LV of the name no record accounts for is never taken over.
	f := newFake()
	f.made("vg0", LVMVolume{Name: "csi-taken", Size: 10 * mi})
	s = lvmController(t, t.TempDir(), f)
	if _, err := s.CreateVolume(ctx, createReq("taken", 10*mi, map[string]string{"backend": "lvm", "volumeGroup": "vg0"})); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("an LV already there: %v, want FailedPrecondition", err)
	}
	if len(s.provisioned) != 0 {
		t.Errorf("a refused create left a record: %v", s.provisioned)
	}
}

func TestLVMThinSnapshotAndRestore(t *testing.T) {
	f := newFake()
	s := lvmController(t, t.TempDir(), f)
	ctx := context.Background()
	thin := map[string]string{"backend": "lvm", "volumeGroup": "vg0", "type": "thin", "thinPool": "pool", "overprovisionRatio": "2"}
	// The pool's 150 MiB free, twice.
	if c := lvmCapacity(t, s, thin); c != 300*mi {
		t.Errorf("thin capacity: %d, want 300 MiB", c)
	}
	v, err := s.CreateVolume(ctx, createReq("src", 100*mi, thin))
	if err != nil {
		t.Fatal(err)
	}
	if c := lvmCapacity(t, s, thin); c != 200*mi {
		t.Errorf("thin capacity after a create: %d, want 200 MiB", c)
	}
	id := v.GetVolume().GetVolumeId()
	snap := &csipb.CreateSnapshotRequest{Name: "s1", SourceVolumeId: id}
	if _, err := s.CreateSnapshot(ctx, snap); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "first stage") {
		t.Errorf("a snapshot before the LV is made: %v", err)
	}
	f.made("vg0", LVMVolume{Name: "csi-src", Size: 100 * mi, Thin: true, Owner: VolumeName(id)})
	r, err := s.CreateSnapshot(ctx, snap)
	if err != nil || !r.GetSnapshot().GetReadyToUse() || r.GetSnapshot().GetSnapshotId() != "snap/n1/s1" {
		t.Fatalf("snapshot: %v, %v", r, err)
	}
	if want := "snapshot vg0/csi-src csi-snap-s1 "; f.calls[len(f.calls)-1] != want {
		t.Errorf("ran %q, want %q", f.calls[len(f.calls)-1], want)
	}
	restore := createReq("copy", 100*mi, thin)
	restore.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snap/n1/s1"}}}
	rv, err := s.CreateVolume(ctx, restore)
	if err != nil {
		t.Fatal(err)
	}
	if want := "snapshot vg0/csi-snap-s1 csi-copy " + VolumeName(rv.GetVolume().GetVolumeId()); f.calls[len(f.calls)-1] != want {
		t.Errorf("restore ran %q, want %q (the restored LV is the volume's, by its tag)", f.calls[len(f.calls)-1], want)
	}
	wrong := createReq("copy2", 100*mi, map[string]string{"backend": "lvm", "volumeGroup": "vg0"})
	wrong.VolumeContentSource = restore.VolumeContentSource
	if _, err := s.CreateVolume(ctx, wrong); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "type thin in that pool") {
		t.Errorf("a thin snapshot restored as linear: %v", err)
	}
	// A linear LV has no snapshots, and says why.
	lin, err := s.CreateVolume(ctx, createReq("lin", 10*mi, map[string]string{"backend": "lvm", "volumeGroup": "vg0"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "s2", SourceVolumeId: lin.GetVolume().GetVolumeId()}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "linear LV") {
		t.Errorf("a snapshot of a linear LV: %v", err)
	}
	if _, err := s.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: "snap/n1/s1"}); err != nil {
		t.Fatal(err)
	}
	if want := "remove vg0/csi-snap-s1 "; f.calls[len(f.calls)-1] != want {
		t.Errorf("delete ran %q, want %q", f.calls[len(f.calls)-1], want)
	}
	caps, _ := s.ControllerGetCapabilities(ctx, nil)
	if !strings.Contains(caps.String(), "CREATE_DELETE_SNAPSHOT") {
		t.Errorf("an lvm node serves snapshots: %v", caps)
	}
}

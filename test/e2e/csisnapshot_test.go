package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/volumed/volumed/drivers/loop"
	"github.com/volumed/volumed/internal/testtool"
)

// btrfsPool mounts a btrfs of size bytes (an image on a loop device)
// as the loop pool: a filesystem that reflinks, so the snapshots are
// served. The env's cleanup unmounts it and detaches the device.
func (e *env) btrfsPool(size int64) string {
	e.t.Helper()
	mkfs := testtool.Need(e.t, "Debian: btrfs-progs", "mkfs.btrfs")[0]
	img := e.image("poolfs.img", size)
	if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
		e.t.Fatalf("mkfs.btrfs: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dev, err := loop.Attach(ctx, loop.Options{File: img})
	if err != nil {
		e.t.Fatal(err)
	}
	p := filepath.Join(e.dir, "pool")
	if err := os.MkdirAll(p, 0o700); err != nil {
		e.t.Fatal(err)
	}
	if err := unix.Mount(dev.Path, p, "btrfs", 0, ""); err != nil {
		e.t.Fatalf("mount the btrfs pool: %v", err)
	}
	return p
}

func createSnapshot(conn *grpc.ClientConn, name, source string) (*csipb.Snapshot, error) {
	ctx, cancel := csiCall()
	defer cancel()
	r, err := csipb.NewControllerClient(conn).CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: name, SourceVolumeId: source})
	return r.GetSnapshot(), err
}

func listSnapshots(t *testing.T, conn *grpc.ClientConn, source string) []string {
	t.Helper()
	ctx, cancel := csiCall()
	defer cancel()
	r, err := csipb.NewControllerClient(conn).ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SourceVolumeId: source})
	if err != nil {
		t.Fatalf("ListSnapshots: %v", err)
	}
	var ids []string
	for _, e := range r.GetEntries() {
		ids = append(ids, e.GetSnapshot().GetSnapshotId())
	}
	return ids
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Errorf("read %s: %v", p, err)
	}
	return string(b)
}

// A snapshot of a mounted volume holds what was written before it (the
// filesystem is flushed first), not what came after; a volume restored
// from it holds the same, and outlives the snapshot's deletion. A crash
// right after the snapshot's record is finished by the retried call.
func TestCSIProvisionSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := e.btrfsPool(2 << 30)
	conn := e.startPool(pool, "VOLUMED_CRASH_AT=create_snapshot:after-record")
	req := createReq("pvc-src", 64<<20)
	// ext4: a restored copy has its source's filesystem UUID, which
	// btrfs and xfs refuse to mount twice on one host.
	req.Parameters = map[string]string{"backend": "loop", "filesystem.type": "ext4"}
	src, err := createVolume(conn, req)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	k := e.provisioned(conn, src)
	k.must("stage", k.stage())
	target := e.target("pod/src")
	k.must("publish", k.publish(target, false))
	// Not synced: the snapshot must flush the filesystem itself.
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("before the snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := createSnapshot(conn, "snap-1", src.GetVolumeId()); err == nil {
		t.Fatal("CreateSnapshot succeeded on an agent meant to die after its record")
	}
	if !e.waitExit(60 * time.Second) {
		t.Fatal("agent did not die of SIGKILL at create_snapshot:after-record")
	}
	conn = e.startPool(pool)
	var snap *csipb.Snapshot
	for range 2 {
		if snap, err = createSnapshot(conn, "snap-1", src.GetVolumeId()); err != nil || !snap.GetReadyToUse() {
			t.Fatalf("CreateSnapshot retried: %v, %v", snap, err)
		}
	}
	_, err = createSnapshot(conn, "snap-1", "loop/"+csiNodeID+"/other")
	wantCode(t, "the same snapshot name of another volume", err, codes.AlreadyExists)
	e.writeAt(filepath.Join(target, "f"), "after the snapshot")
	if ids := listSnapshots(t, conn, src.GetVolumeId()); len(ids) != 1 || ids[0] != snap.GetSnapshotId() {
		t.Errorf("snapshots of the source: %v", ids)
	}

	restore := createReq("pvc-restored", 64<<20)
	restore.Parameters = req.Parameters
	restore.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()}}}
	restored, err := createVolume(conn, restore)
	if err != nil {
		t.Fatalf("CreateVolume from the snapshot: %v", err)
	}
	ctx, cancel := csiCall()
	defer cancel()
	if _, err := csipb.NewControllerClient(conn).DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()}); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	r := e.provisioned(conn, restored)
	r.staging = filepath.Join(e.dir, "kubelet", "restored", "globalmount")
	r.must("stage the restored volume", r.stage())
	rt := e.target("pod/restored")
	r.must("publish the restored volume", r.publish(rt, false))
	if got := readFile(t, filepath.Join(rt, "f")); got != "before the snapshot" {
		t.Errorf("restored volume holds %q", got)
	}
	if got := readFile(t, filepath.Join(target, "f")); got != "after the snapshot" {
		t.Errorf("source volume holds %q", got)
	}
	for _, v := range []*kubelet{k, r} {
		v.must("unpublish", v.unpublish(map[*kubelet]string{k: target, r: rt}[v]))
		v.must("unstage", v.unstage())
		if err := deleteVolume(conn, v.id); err != nil {
			t.Errorf("DeleteVolume %s: %v", v.id, err)
		}
	}
	if ids := listSnapshots(t, conn, ""); len(ids) != 0 {
		t.Errorf("snapshots left: %v", ids)
	}
	left, _ := filepath.Glob(filepath.Join(pool, "*.img"))
	snaps, _ := filepath.Glob(filepath.Join(pool, ".snapshots", "*"))
	if len(left)+len(snaps) > 0 {
		t.Errorf("left in the pool: %v %v", left, snaps)
	}
}

// writeAt replaces the file p's content and syncs it.
func (e *env) writeAt(p, content string) {
	e.t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		e.t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		e.t.Fatal(err)
	}
}

// SIGKILL between a snapshot copy's removal and its record's: the record
// stays (its space still promised) and the retried delete finishes.
func TestCSISnapshotDeleteCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := e.btrfsPool(1 << 30)
	conn := e.startPool(pool)
	vol, err := createVolume(conn, createReq("pvc-d", 64<<20))
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	snap, err := createSnapshot(conn, "snap-d", vol.GetVolumeId())
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	withSnap := poolCapacity(t, conn)
	e.stop()
	if e.waitExit(60 * time.Second) {
		t.Fatal("agent killed on SIGTERM")
	}
	conn = e.startPool(pool, "VOLUMED_CRASH_AT=delete_snapshot:after-file")
	del := func() error {
		ctx, cancel := csiCall()
		defer cancel()
		_, err := csipb.NewControllerClient(conn).DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()})
		return err
	}
	if del() == nil {
		t.Fatal("DeleteSnapshot succeeded on an agent meant to die after removing the copy")
	}
	if !e.waitExit(60 * time.Second) {
		t.Fatal("agent did not die of SIGKILL at delete_snapshot:after-file")
	}
	conn = e.startPool(pool)
	if ids := listSnapshots(t, conn, ""); len(ids) != 1 {
		t.Errorf("after the crash: snapshots %v, want the record kept", ids)
	}
	if c := poolCapacity(t, conn); c > withSnap+(16<<20) {
		t.Errorf("after the crash: capacity %d, the snapshot's promise (%d before) was given back early", c, withSnap)
	}
	for range 2 {
		if err := del(); err != nil {
			t.Fatalf("DeleteSnapshot retried: %v", err)
		}
	}
	if ids := listSnapshots(t, conn, ""); len(ids) != 0 {
		t.Errorf("snapshots left: %v", ids)
	}
	if left, _ := filepath.Glob(filepath.Join(pool, ".snapshots", "*")); len(left) > 0 {
		t.Errorf("left in the pool: %v", left)
	}
	if err := deleteVolume(conn, vol.GetVolumeId()); err != nil {
		t.Errorf("DeleteVolume: %v", err)
	}
}

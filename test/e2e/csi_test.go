package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/agent/csi"
	"github.com/volumed/volumed/internal/testtool"
)

// csiCall bounds one call like the kubelet does.
func csiCall() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

// kubelet drives one volume through the node service as the kubelet does.
type kubelet struct {
	t       *testing.T
	node    csipb.NodeClient
	id      string
	ctx     map[string]string
	staging string
	cap     *csipb.VolumeCapability
}

func (e *env) kubelet(conn *grpc.ClientConn, id string, size int64, c *csipb.VolumeCapability) *kubelet {
	ctx := e.loopContext(id, size)
	return &kubelet{t: e.t, node: csipb.NewNodeClient(conn), id: id, ctx: ctx,
		staging: filepath.Join(e.dir, "kubelet", "plugins", "kubernetes.io", "csi", csi.DriverName, id, "globalmount"), cap: c}
}

func (k *kubelet) stage() error {
	ctx, cancel := csiCall()
	defer cancel()
	if err := os.MkdirAll(k.staging, 0o750); err != nil {
		k.t.Fatal(err)
	}
	_, err := k.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: k.id, StagingTargetPath: k.staging, VolumeCapability: k.cap, VolumeContext: k.ctx})
	return err
}

func (k *kubelet) publish(target string, ro bool) error {
	ctx, cancel := csiCall()
	defer cancel()
	_, err := k.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: k.id, StagingTargetPath: k.staging, TargetPath: target, VolumeCapability: k.cap, VolumeContext: k.ctx, Readonly: ro})
	return err
}

func (k *kubelet) unpublish(target string) error {
	ctx, cancel := csiCall()
	defer cancel()
	_, err := k.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: k.id, TargetPath: target})
	return err
}

func (k *kubelet) unstage() error {
	ctx, cancel := csiCall()
	defer cancel()
	_, err := k.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: k.id, StagingTargetPath: k.staging})
	return err
}

// unstageDetached unstages and checks that no loop device is left on
// the volume's image.
func (k *kubelet) unstageDetached(e *env) {
	k.t.Helper()
	k.must("unstage", k.unstage())
	if n := len(e.loops()[k.ctx["loop.file"]]); n != 0 {
		k.t.Errorf("%d loop devices left after unstage", n)
	}
}

func (k *kubelet) must(what string, err error) {
	k.t.Helper()
	if err != nil {
		k.t.Fatalf("%s: %v", what, err)
	}
}

// Twice each, as a kubelet retrying after a lost answer does: the second
// call finds the work done and says so.
func TestCSILifecycle(t *testing.T) {
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)
	// btrfs: ext4 grows online only with CAP_SYS_RESOURCE, which this
	// machine's tests lack (see drivers/blockfs).
	k := e.kubelet(conn, "pv-data", 300<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, "btrfs"))
	a, b := e.target("pod-a/volume"), e.target("pod-b/volume")
	for i := 0; i < 2; i++ {
		k.must("stage", k.stage())
	}
	for i := 0; i < 2; i++ {
		k.must("publish a", k.publish(a, false))
		k.must("publish b (ro)", k.publish(b, true))
	}
	if err := os.WriteFile(filepath.Join(a, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("write through target a: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(b, "hello")); err != nil || string(got) != "hi" {
		t.Fatalf("read through target b: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(b, "x"), nil, 0o644); !isROFS(err) {
		t.Errorf("write through the read-only target b: %v, want EROFS", err)
	}
	ms := e.mounts()
	for _, p := range []string{k.staging, a, b} {
		if n := len(ms[p]); n != 1 {
			t.Errorf("%s mounted %d times, want 1", p, n)
		}
	}
	if n := len(e.loops()[k.ctx["loop.file"]]); n != 1 {
		t.Errorf("%d loop devices for the image, want 1", n)
	}

	// The volume shows in volumed status like a manifest's.
	name := csi.VolumeName(k.id)
	st := e.waitReady(name)
	if v := find(st, name); v.File != "csi:"+k.id || v.StagingPath != k.staging || len(v.Targets) != 2 {
		t.Errorf("status of %s: file %q staging %q targets %+v", name, v.File, v.StagingPath, v.Targets)
	}

	ctx, cancel := csiCall()
	defer cancel()
	stats, err := k.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: k.id, VolumePath: a})
	if err != nil {
		t.Fatal(err)
	}
	if u := stats.GetUsage(); len(u) != 2 || u[0].GetTotal() < 200<<20 || u[0].GetUsed() <= 0 || u[1].GetUnit() != csipb.VolumeUsage_INODES {
		t.Errorf("stats: %v", u)
	}
	health, err := k.node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{VolumeId: k.id})
	if err != nil || len(health.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Errorf("health of a healthy volume: %v, %v", health, err)
	}

	for i := 0; i < 2; i++ {
		resp, err := k.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: k.id, VolumePath: a, CapacityRange: &csipb.CapacityRange{RequiredBytes: 400 << 20}})
		if err != nil {
			t.Fatalf("expand: %v", err)
		}
		if resp.GetCapacityBytes() < 400<<20 {
			t.Errorf("expand: capacity %d, want at least 400Mi", resp.GetCapacityBytes())
		}
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(a, &sfs); err != nil || int64(sfs.Blocks)*sfs.Bsize < 350<<20 {
		t.Errorf("the filesystem did not grow online: %d bytes (%v)", int64(sfs.Blocks)*sfs.Bsize, err)
	}
	csiTeardown(t, e, k, name, a, b)
}

// csiTeardown unpublishes volume name from targets a and b and unstages
// it, each twice, and checks that nothing is left but the image and its
// data.
func csiTeardown(t *testing.T, e *env, k *kubelet, name, a, b string) {
	for i := 0; i < 2; i++ {
		k.must("unpublish a", k.unpublish(a))
		k.must("unpublish b", k.unpublish(b))
	}
	for _, p := range []string{a, b} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("target %s left behind after unpublish: %v", p, err)
		}
	}
	for i := 0; i < 2; i++ {
		k.must("unstage", k.unstage())
	}
	ms := e.mounts()
	for _, p := range []string{k.staging, a, b} {
		if n := len(ms[p]); n != 0 {
			t.Errorf("%s still mounted %d times after unstage", p, n)
		}
	}
	if n := len(e.loops()[k.ctx["loop.file"]]); n != 0 {
		t.Errorf("%d loop devices left after unstage", n)
	}
	e.waitGone(name)
	if got, err := os.ReadFile(k.ctx["loop.file"]); err != nil || !bytes.Contains(got, []byte("hi")) {
		t.Errorf("the image lost its data on unstage (%v)", err)
	}
}

func deviceSize(p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, io.SeekEnd)
}

func isROFS(err error) bool { return errors.Is(err, unix.EROFS) }

// Bad requests get the codes the CSI spec names, and a second call on a
// volume while one runs gets Aborted.
func TestCSIErrors(t *testing.T) {
	e := newEnv(t)
	// A mkfs that takes 3 s holds the first stage in flight.
	real, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		testtool.Missing(t, "mkfs.ext4", "e2fsprogs", err)
	}
	bin := filepath.Join(e.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nsleep 3\nexec %s \"$@\"\n", real)
	if err := os.WriteFile(filepath.Join(bin, "mkfs.ext4"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	conn := e.startCSI("PATH=" + bin + ":" + os.Getenv("PATH"))
	e.csiReady(conn)
	k := e.kubelet(conn, "pv-err", 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, ""))

	bad := *k
	bad.ctx = map[string]string{"loop.file": "relative.img"}
	if err := bad.stage(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("stage with a relative loop.file: %v, want InvalidArgument", err)
	}
	bad.ctx = map[string]string{"loop.fiel": "/x.img"}
	if err := bad.stage(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spec.source.loop.fiel") {
		t.Errorf("stage with a misspelt field: %v, want InvalidArgument naming it", err)
	}
	if err := k.publish(e.target("early"), false); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("publish before stage: %v, want FailedPrecondition", err)
	}

	first := make(chan error, 1)
	go func() { first <- k.stage() }()
	time.Sleep(time.Second)
	if err := k.stage(); status.Code(err) != codes.Aborted {
		t.Errorf("a stage while one runs: %v, want Aborted", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("stage: %v", err)
	}
	k.must("stage again", k.stage())

	k.must("publish", k.publish(e.target("one"), false))
	if err := k.publish(e.target("two"), false); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second target of a single-writer volume: %v, want FailedPrecondition", err)
	}
	ctx, cancel := csiCall()
	defer cancel()
	if _, err := k.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "nope", VolumePath: e.target("one")}); status.Code(err) != codes.NotFound {
		t.Errorf("stats of an unknown volume: %v, want NotFound", err)
	}
	if _, err := k.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: k.id, VolumePath: e.target("two")}); status.Code(err) != codes.NotFound {
		t.Errorf("stats at a path the volume is not at: %v, want NotFound", err)
	}
}

// publishedCSI starts an agent serving CSI with one ext4 volume, id,
// staged and published at its target.
func publishedCSI(t *testing.T, id string) (*env, *kubelet, string) {
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)
	k := e.kubelet(conn, id, 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"))
	target := e.target("pod/volume")
	k.must("stage", k.stage())
	k.must("publish", k.publish(target, false))
	return e, k, target
}

// A volume staged and published through CSI survives a SIGKILL of the
// agent and a restart with nothing remounted: the kubelet never stages
// it again, and the agent keeps it from its own records.
func TestCSISurvivesRestart(t *testing.T) {
	e, k, target := publishedCSI(t, "pv-keep")
	before := e.mountIDs()
	loopsBefore := e.loops()
	e.kill()

	conn := e.startCSI()
	e.csiReady(conn)
	name := csi.VolumeName(k.id)
	e.waitReady(name)
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Errorf("mounts changed across the restart:\n before %v\n after  %v", before, after)
	}
	if after := e.loops(); !reflect.DeepEqual(loopsBefore, after) {
		t.Errorf("loop devices changed across the restart: %v -> %v", loopsBefore, after)
	}
	// The kubelet's next look finds it as it left it.
	k.node = csipb.NewNodeClient(conn)
	k.must("publish again", k.publish(target, false))
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Errorf("a repeated publish remounted: %v -> %v", before, after)
	}
	k.must("unpublish", k.unpublish(target))
	k.must("unstage", k.unstage())
	e.waitGone(name)
}

// A record that no longer reads stops the start, naming it, rather than
// let the first pass tear its volume down under a running pod.
func TestCSIBadRecordKeepsVolumes(t *testing.T) {
	e, k, _ := publishedCSI(t, "pv-rec")
	before := e.mountIDs()
	e.stop()

	rec := filepath.Join(e.state, "csi", csi.VolumeName(k.id)+".json")
	good, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec, []byte(strings.Replace(string(good), `"loop.file"`, `"loop.fiel"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitExit(30 * time.Second)
	if log := e.logText(); !strings.Contains(log, rec) || !strings.Contains(log, "spec.source.loop.fiel") {
		t.Errorf("the refusal does not name the record and the field:\n%s", log)
	}
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Errorf("mounts changed: %v -> %v", before, after)
	}

	if err := os.WriteFile(rec, good, 0o600); err != nil {
		t.Fatal(err)
	}
	conn := e.startCSI()
	e.csiReady(conn)
	e.waitReady(csi.VolumeName(k.id))
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Errorf("mounts changed after the record was mended: %v -> %v", before, after)
	}
}

// SIGKILL at every crash point of a stage (and of the publish after
// it); the kubelet retries the call against the restarted agent, which
// finds the work done or finishes it, with one loop device, one staging
// mount, one target mount and one filesystem.
func TestCSICrashDuringStage(t *testing.T) {
	points := []string{"attach:after-intent", "attach:after-kernel", "format:after-intent", "format:after-kernel",
		"mount_device:after-intent", "mount_device:after-kernel", "publish:after-intent", "publish:after-kernel"}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			e.extraArgs = []string{"--csi-endpoint", "unix://" + filepath.Join(e.dir, "csi.sock"), "--node-id", csiNodeID, "--parallel", "1"}
			conn := e.startCSI("VOLUMED_CRASH_AT=" + point)
			e.csiReady(conn)
			k := e.kubelet(conn, "pv-crash", 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"))
			target := e.target("pod/volume")
			publishing := strings.HasPrefix(point, "publish:")
			err := k.stage()
			if publishing {
				k.must("stage", err)
				err = k.publish(target, false)
			}
			if err == nil {
				t.Fatalf("the call returned success from an agent meant to die at %s", point)
			}
			if !e.waitExit(30 * time.Second) {
				t.Fatalf("agent did not die of SIGKILL at %s", point)
			}
			uuid := fsUUID(t, k.ctx["loop.file"])
			conn = e.startCSI()
			k.node = csipb.NewNodeClient(conn)
			e.csiReady(conn)
			k.must("stage retried", k.stage())
			k.must("stage again", k.stage())
			if publishing {
				k.must("publish retried", k.publish(target, false))
				if n := len(e.mounts()[target]); n != 1 {
					t.Errorf("target mounted %d times, want 1", n)
				}
				k.must("unpublish", k.unpublish(target))
			}
			if uuid != "" {
				if got := fsUUID(t, k.ctx["loop.file"]); got != uuid {
					t.Errorf("filesystem made again: UUID %s -> %s", uuid, got)
				}
			}
			if n := len(e.mounts()[k.staging]); n != 1 {
				t.Errorf("staging path mounted %d times, want 1", n)
			}
			if n := len(e.loops()[k.ctx["loop.file"]]); n != 1 {
				t.Errorf("%d loop devices for the image, want 1", n)
			}
			k.unstageDetached(e)
		})
	}
}

// A raw block volume: the device node itself is published at the
// target; what is written through the target is read from the device.
func TestCSIRawBlock(t *testing.T) {
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)
	k := e.kubelet(conn, "pv-raw", 16<<20, blockCap())
	target := filepath.Join(e.dir, "kubelet", "pods", "p1", "volumeDevices", "raw")
	for i := 0; i < 2; i++ {
		k.must("stage", k.stage())
		k.must("publish", k.publish(target, false))
	}
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Fatalf("target %s is not a block device: mode %o, %v", target, st.Mode, err)
	}
	msg := []byte("written through the raw block target")
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(msg, 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	devs := e.loops()[k.ctx["loop.file"]]
	if len(devs) != 1 {
		t.Fatalf("loop devices for the image: %v", devs)
	}
	got := make([]byte, len(msg))
	d, err := os.Open(devs[0])
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.ReadAt(got, 4096)
	d.Close()
	if err != nil || !bytes.Equal(got, msg) {
		t.Errorf("read through %s: %q, %v", devs[0], got, err)
	}
	ctx, cancel := csiCall()
	defer cancel()
	stats, err := k.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: k.id, VolumePath: target})
	if err != nil || len(stats.GetUsage()) != 1 || stats.GetUsage()[0].GetTotal() != 16<<20 {
		t.Errorf("stats of the block volume: %v, %v", stats, err)
	}
	// Expanded: the image and the device grow, the data stays.
	resp, err := k.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: k.id, VolumePath: target, CapacityRange: &csipb.CapacityRange{RequiredBytes: 32 << 20}})
	if err != nil || resp.GetCapacityBytes() != 32<<20 {
		t.Errorf("expand the block volume: %v, %v", resp, err)
	}
	if n, err := deviceSize(target); err != nil || n != 32<<20 {
		t.Errorf("block target after expand: %d bytes, %v", n, err)
	}
	for i := 0; i < 2; i++ {
		k.must("unpublish", k.unpublish(target))
		k.must("unstage", k.unstage())
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("block target left behind: %v", err)
	}
	img, err := os.ReadFile(k.ctx["loop.file"])
	if err != nil || !bytes.Equal(img[4096:4096+len(msg)], msg) {
		t.Errorf("the image lost what was written through the target (%v)", err)
	}
	if n := len(e.loops()[k.ctx["loop.file"]]); n != 0 {
		t.Errorf("%d loop devices left after unstage", n)
	}
}

// The same from a manifest: mounts: [{path, block: true}], no filesystem.
func TestManifestRawBlock(t *testing.T) {
	e := newEnv(t)
	img := filepath.Join(e.images, "raw.img")
	target := e.target("raw-dev")
	e.write("raw.yaml", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: raw}\nspec:\n  source:\n    loop: {file: "+img+", create: {size: 8Mi}}\n  mounts:\n    - {path: "+target+", block: true}\n")
	e.start()
	v := find(e.waitReady("raw"), "raw")
	var ts, ds unix.Stat_t
	if err := unix.Stat(target, &ts); err != nil || unix.Stat(v.Device, &ds) != nil || ts.Mode&unix.S_IFMT != unix.S_IFBLK || ts.Rdev != ds.Rdev {
		t.Fatalf("target %s is not the device %s: %v", target, v.Device, err)
	}
	before := e.mountIDs()
	e.kill()
	e.start()
	e.waitReady("raw")
	if after := e.mountIDs(); !reflect.DeepEqual(before, after) {
		t.Errorf("the block target was redone after a restart: %v -> %v", before, after)
	}
	e.remove("raw.yaml")
	e.waitGone("raw")
	if n := len(e.mounts()[target]); n != 0 {
		t.Errorf("block target still mounted after the manifest went")
	}
}

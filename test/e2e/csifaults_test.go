package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/agent/csi"
)

// NodeUnpublishVolume removes only what volumed made: a target it has no
// record of publishing (a plain file, an unrelated directory, a path of
// a volume never staged, or staged but published elsewhere) is answered
// OK and left byte for byte; a directory the kubelet made is unmounted
// and left; the directory volumed made at publish goes.
func TestCSIUnpublishLeavesWhatItDidNotMake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)
	k := e.kubelet(conn, "pv-unpub", 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, "ext4"))

	file := e.target("pod-x/data.db")
	dir := e.target("pod-y/volume")
	full := e.target("pod-z/volume")
	for _, p := range []string{filepath.Dir(file), dir, full} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("the only copy"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	untouched := func(when string) {
		t.Helper()
		if b, err := os.ReadFile(file); err != nil || string(b) != "the only copy" {
			t.Errorf("%s: the plain file at the target: %q, %v", when, b, err)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Errorf("%s: the unrelated directory: %v", when, err)
		}
		if b, err := os.ReadFile(filepath.Join(full, "keep")); err != nil || string(b) != "keep" {
			t.Errorf("%s: the directory's file: %q, %v", when, b, err)
		}
	}
	for _, p := range []string{file, dir, full} {
		if err := k.unpublish(p); err != nil {
			t.Errorf("unpublish %s of a volume never staged: %v, want OK", p, err)
		}
	}
	untouched("volume never staged")

	k.must("stage", k.stage())
	made := e.target("pod-a/volume") // nothing there: volumed makes it
	kubelets := e.target("pod-b/volume")
	if err := os.MkdirAll(kubelets, 0o750); err != nil {
		t.Fatal(err)
	}
	k.must("publish at a new path", k.publish(made, false))
	k.must("publish at the kubelet's directory", k.publish(kubelets, false))
	for _, p := range []string{file, dir, full} {
		if err := k.unpublish(p); err != nil {
			t.Errorf("unpublish %s of a volume published elsewhere: %v, want OK", p, err)
		}
	}
	untouched("volume published elsewhere")
	if ms := e.mounts(); len(ms[made]) != 1 || len(ms[kubelets]) != 1 {
		t.Errorf("the volume's own targets lost their mounts: %d at %s, %d at %s", len(ms[made]), made, len(ms[kubelets]), kubelets)
	}

	k.must("unpublish the target volumed made", k.unpublish(made))
	k.must("unpublish the kubelet's target", k.unpublish(kubelets))
	if _, err := os.Lstat(made); !os.IsNotExist(err) {
		t.Errorf("the target volumed made is still there after unpublish: %v", err)
	}
	if fi, err := os.Stat(kubelets); err != nil || !fi.IsDir() {
		t.Errorf("the kubelet's own target directory was removed: %v", err)
	}
	if ms := e.mounts(); len(ms[made])+len(ms[kubelets]) != 0 {
		t.Errorf("targets still mounted after unpublish")
	}
	k.must("unstage", k.unstage())
	untouched("after unstage")
}

// NodeStageVolume refuses a staging directory that holds anything, as a
// manifest's target is refused: the mount would hide it. Nothing is
// mounted there and the file stays.
func TestCSIStageRefusesNonEmptyDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)
	k := e.kubelet(conn, "pv-full", 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"))
	if err := os.MkdirAll(k.staging, 0o750); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(k.staging, "keep")
	if err := os.WriteFile(keep, []byte("not the volume's"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := k.stage()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), k.staging) {
		t.Errorf("stage at a non-empty directory: %v, want FailedPrecondition naming %s as not empty", err, k.staging)
	}
	if n := len(e.mounts()[k.staging]); n != 0 {
		t.Errorf("%d mounts at the non-empty staging directory", n)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "not the volume's" {
		t.Errorf("the staging directory's file: %q, %v", b, err)
	}
	k.unstageDetached(e)
}

// A volume context may not ask for setuid binaries or device nodes on
// the host unless the agent was started with --csi-allow-suid-dev; CSI
// mounts are nosuid,nodev.
func TestCSIRefusesSuidAndDevUnlessAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)
	for i, c := range []map[string]string{
		{"filesystem.allowSuid": "true"},
		{"filesystem.allowDev": "true"},
		{"filesystem.mountOptions": "[suid]"},
	} {
		k := e.kubelet(conn, fmt.Sprintf("pv-suid%d", i), 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"))
		for key, v := range c {
			k.ctx[key] = v
		}
		err := k.stage()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--csi-allow-suid-dev") {
			t.Errorf("stage with %v: %v, want InvalidArgument naming --csi-allow-suid-dev", c, err)
		}
		if n := len(e.mounts()[k.staging]); n != 0 {
			t.Errorf("stage with %v: mounted", c)
		}
		if _, err := os.Stat(k.ctx["loop.file"]); !os.IsNotExist(err) {
			t.Errorf("stage with %v: the image was made: %v", c, err)
		}
	}
	k := e.kubelet(conn, "pv-plain", 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"))
	k.must("stage", k.stage())
	target := e.target("pod/volume")
	k.must("publish", k.publish(target, false))
	ms := e.mounts()
	for _, p := range []string{k.staging, target} {
		if len(ms[p]) != 1 || !hasOpts(ms[p][0].Options, "nosuid", "nodev") {
			t.Errorf("%s: mounts %v, want one nosuid,nodev", p, ms[p])
		}
	}

	e.stop()
	e.waitExit(60 * time.Second)
	e.extraArgs = append(e.extraArgs, "--csi-allow-suid-dev")
	conn = e.startCSI()
	e.csiReady(conn)
	k = e.kubelet(conn, "pv-suid", 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"))
	k.ctx["filesystem.allowSuid"] = "true"
	k.must("stage with allowSuid under --csi-allow-suid-dev", k.stage())
	if ms := e.mounts()[k.staging]; len(ms) != 1 || hasOpts(ms[0].Options, "nosuid") || !hasOpts(ms[0].Options, "nodev") {
		t.Errorf("allowSuid under the flag: mounts %v, want one without nosuid, with nodev", ms)
	}
}

func hasOpts(opts string, want ...string) bool {
	have := strings.Split(opts, ",")
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// A stage refused for one bad secret key writes no secret at all,
// whatever order the map gives the keys in.
func TestCSIRefusedStageLeavesNoSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)
	k := e.kubelet(conn, "pv-secret", 64<<20, mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"))
	secrets := map[string]string{"../../x": "escape"}
	for i := range 20 {
		secrets[fmt.Sprintf("key%02d", i)] = "s3cret"
	}
	for range 3 {
		ctx, cancel := csiCall()
		_, err := k.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: k.id, StagingTargetPath: k.staging,
			VolumeCapability: k.cap, VolumeContext: k.ctx, Secrets: secrets})
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "../../x") {
			t.Errorf("stage with a bad secret key: %v, want InvalidArgument naming it", err)
		}
	}
	var left []string
	_ = filepath.Walk(e.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && (strings.HasPrefix(fi.Name(), "key") || fi.Name() == "x") {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("a refused stage left secret files: %v", left)
	}
}

// A second agent, with its own state dir and API socket, started on the
// CSI endpoint a running agent serves, exits naming it; the first keeps
// its endpoint.
func TestCSISocketNotTakenOver(t *testing.T) {
	t.Parallel()
	first := newEnv(t)
	conn := first.startCSI()
	first.csiReady(conn)
	second := newEnv(t)
	second.extraArgs = first.extraArgs
	second.start()
	second.waitExit(60 * time.Second)
	if log := second.logText(); !strings.Contains(log, "another volumed answers on the socket "+filepath.Join(first.dir, "csi.sock")) {
		t.Errorf("the second agent's log does not name the endpoint it refused:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(second.state, "state.db")); !os.IsNotExist(err) {
		t.Errorf("the refused agent opened a state file: %v", err)
	}
	// A new connection reaches the first agent still.
	fresh, err := grpc.NewClient("unix://"+filepath.Join(first.dir, "csi.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	first.csiReady(fresh)
}

// The CSI endpoint serves root only, as the local API does: a non-root
// process holding CAP_DAC_OVERRIDE gets through the socket's mode but is
// refused by its uid (SO_PEERCRED).
func TestCSISocketServesRootOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)
	sock := filepath.Join(e.dir, "csi.sock")
	call := func(nobody bool) (string, error) {
		cmd := exec.Command(helperBin, sock)
		cmd.Env = append(os.Environ(), helperEnv+"=csi-plugin-info")
		if nobody {
			asNobody(cmd)
			cmd.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_DAC_OVERRIDE}
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := call(false); err != nil || !strings.Contains(out, csi.DriverName) {
		t.Fatalf("the helper as root: %v: %s", err, out)
	}
	out, err := call(true)
	if err == nil || strings.Contains(out, csi.DriverName) {
		t.Errorf("a non-root peer with CAP_DAC_OVERRIDE was served: %s", out)
	}
	if !strings.Contains(out, "reached the socket") {
		t.Errorf("the non-root helper did not get through the socket's mode (its capability is not in effect): %s", out)
	}
	e.waitLog("refused a non-root client on the socket")
}

// waitLog waits until the agent's log holds s.
func (e *env) waitLog(s string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(e.logText(), s) {
		if time.Now().After(deadline) {
			e.t.Fatalf("the agent never logged %q", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// csiPluginInfo SOCK connects to the CSI socket (printing "reached the
// socket" once the kernel let it connect) and prints GetPluginInfo's
// answer; exit 1 when it is refused.
func csiPluginInfo(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: csi-plugin-info SOCK")
		return 2
	}
	c, err := unixDial(args[0])
	if err != nil {
		fmt.Println("connect:", err)
		return 1
	}
	c.Close()
	fmt.Println("reached the socket")
	conn, err := grpc.NewClient("unix://"+args[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := csipb.NewIdentityClient(conn).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil {
		fmt.Println("GetPluginInfo:", err)
		return 1
	}
	fmt.Println(r.GetName())
	return 0
}

func unixDial(p string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: p}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("connect %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

package crashcheck

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/internal/logwrites"
	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
	"github.com/volumed/volumed/test/agenttest"
)

var volumedBin string

func TestMain(m *testing.M) {
	HelperMain()
	if !testns.Inside() {
		testns.Main(m)
		return
	}
	dir, err := os.MkdirTemp("", "volumed-crashcheck-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		bin, err := agenttest.Build(dir, false)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		volumedBin = bin
		return m.Run()
	}()
	os.Exit(code)
}

// hostManifests: two ext4 volumes and an xfs one on the logged
// filesystem, each published at one target.
var hostManifests = map[string]string{
	"a.yaml": manifest("a", "ext4", "64Mi"),
	"b.yaml": manifest("b", "ext4", "32Mi"),
	"c.yaml": manifest("c", "xfs", "320Mi"),
}

var hostVolumes = []Volume{{"a", "images/a.img", "a"}, {"b", "images/b.img", "b"}, {"c", "images/c.img", "c"}}

func manifest(name, fstype, size string) string {
	return fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %[1]s}
spec:
  source:
    loop: {file: %[4]s/images/%[1]s.img, create: {size: %[3]s}}
  filesystem: {type: %[2]s}
  mounts: [{path: %[5]s/%[1]s}]
`, name, fstype, size, Root, Mnt)
}

// TestReplayHostRecording records, without a VM, every write of a first
// convergence (three volumes created and formatted, a file fsync'd into
// one) to the filesystem holding the state directory and the images:
// qemu-storage-daemon's blklogwrites driver writes the dm-log-writes
// format, and its FUSE export is the disk a loop device sits on. Then it
// checks the agent on the disks a power cut could have left at each
// flush, and on a seeded sample of what a volatile cache could drop.
// VOLUMED_CRASH_STATES bounds the states (default 100), VOLUMED_CRASH_SEED
// picks the sample.
func TestReplayHostRecording(t *testing.T) {
	testtool.Need(t, "qemu-system-common", "qemu-storage-daemon")
	testtool.Need(t, "e2fsprogs", "mkfs.ext4")
	testtool.Need(t, "xfsprogs", "mkfs.xfs")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testtool.Missing(t, "/dev/fuse", "the fuse kernel module", err)
	}
	seed, max := Knobs(t, 100)
	dir := t.TempDir()
	t.Cleanup(func() { agenttest.Cleanup(dir, t.Logf) })
	rec := record(t, dir, seed)

	c := Case{
		Bin: volumedBin, Base: rec.base, Log: rec.log, Manifests: hostManifests, StateDir: "state",
		Volumes: hostVolumes, Work: filepath.Join(dir, "work"), Logf: t.Logf,
		Proofs: []Proof{{Volume: "a", Path: "proof", Content: rec.proof, After: rec.fsynced - 1}},
	}
	if err := os.MkdirAll(c.Work, 0o755); err != nil {
		t.Fatal(err)
	}
	states := Plan(rec.log, rec.started, seed, max)
	start := time.Now()
	results, err := Run(context.Background(), c, states)
	if err != nil {
		t.Fatal(err)
	}
	Report(t, results, time.Since(start))

	// The checks can fail: the last state against a proof it does not
	// hold and a filesystem it never had.
	c.Proofs[0].Content = "other bytes"
	c.Known = []Known{{Volume: "b", UUID: "00000000-0000-0000-0000-000000000000", After: rec.started}}
	c.Work = filepath.Join(dir, "work-sabotaged")
	if err := os.MkdirAll(c.Work, 0o755); err != nil {
		t.Fatal(err)
	}
	last := []logwrites.State{{End: len(rec.log.Entries)}}
	results, err = Run(context.Background(), c, last)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(results[0].Problems, "\n"); !strings.Contains(got, "proof, fsync'd before entry") || !strings.Contains(got, "b: held filesystem 00000000") {
		t.Errorf("a lost file and a changed filesystem went unseen; problems:\n%s", got)
	}
}

// recording is a log and what the recorder knew of it.
type recording struct {
	base, proof string
	log         *logwrites.Log
	started     int // entries logged before the agent started
	fsynced     int // entries logged once the proof's fsync returned
}

func record(t *testing.T, dir string, seed int64) recording {
	t.Helper()
	data, base, logf, export := filepath.Join(dir, "data.img"), filepath.Join(dir, "base.img"), filepath.Join(dir, "log.img"), filepath.Join(dir, "export")
	for _, f := range []struct {
		path string
		size int64
	}{{data, 1 << 30}, {logf, 4 << 30}, {export, 0}} {
		if err := os.WriteFile(f.path, nil, 0o600); err != nil || os.Truncate(f.path, f.size) != nil {
			t.Fatalf("create %s: %v", f.path, err)
		}
	}
	run(t, "mkfs.ext4", "-q", "-F", data)
	if err := SparseCopy(base, data); err != nil {
		t.Fatal(err)
	}
	qsd := exportLogged(t, data, logf, export)
	root, mnt, config := filepath.Join(dir, "rec", "root"), filepath.Join(dir, "rec", "mnt"), filepath.Join(dir, "rec", "config")
	if err := mountImage(export, root); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"state", "images"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeManifests(Case{Manifests: hostManifests}, config, root, mnt); err != nil {
		t.Fatal(err)
	}
	run(t, "sync")
	rec := recording{base: base, started: logged(t, logf), proof: fmt.Sprintf("fsync'd once Ready, seed %d\n", seed)}
	socket := filepath.Join(dir, "rec", "volumed.sock")
	p, err := agenttest.Start(nil, volumedBin, []string{"run", "--config-dir", config, "--state-dir", filepath.Join(root, "state"),
		"--socket", socket, "--metrics-address", "", "--log-level", "debug"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if st, err := agenttest.WaitStatus(ctx, socket, func(s *api.Status) bool { return allReady(s, hostVolumes) }); err != nil {
		p.Signal(syscall.SIGKILL)
		t.Fatalf("recording: volumes not Ready: %v %s\n%s", err, agenttest.Dump(st), p.Logs())
	}
	writeSynced(t, filepath.Join(mnt, "a", "proof"), rec.proof)
	rec.fsynced = logged(t, logf)
	p.Signal(syscall.SIGTERM)
	agenttest.Cleanup(filepath.Join(dir, "rec"), t.Logf)
	agenttest.Cleanup(export, t.Logf)
	qsd.Signal(syscall.SIGTERM)
	f, err := os.Open(logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, _ := f.Stat()
	if rec.log, err = logwrites.Read(f, fi.Size()); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d entries: %d before the agent started, %d once the proof was fsync'd", len(rec.log.Entries), rec.started, rec.fsynced)
	return rec
}

// exportLogged serves data through blklogwrites (log to logf) as the
// file export, until the test ends.
func exportLogged(t *testing.T, data, logf, export string) *agenttest.Process {
	t.Helper()
	p, err := agenttest.Start(nil, "qemu-storage-daemon",
		[]string{"--blockdev", "driver=file,node-name=data,filename=" + data,
			"--blockdev", "driver=file,node-name=log,filename=" + logf,
			"--blockdev", "driver=blklogwrites,node-name=lw,file=data,log=log,log-sector-size=512,log-super-update-interval=1",
			"--export", "type=fuse,id=exp,node-name=lw,mountpoint=" + export + ",writable=on"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Signal(syscall.SIGTERM) })
	for deadline := time.Now().Add(30 * time.Second); ; {
		if ms, _ := mountinfo.GetMounts(mountinfo.SingleEntryFilter(export)); len(ms) == 1 {
			return p
		}
		if exited, _ := p.Wait(0); exited || time.Now().After(deadline) {
			t.Fatalf("qemu-storage-daemon did not export %s: %s", export, p.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logged reads the number of entries in the log's super block (kept up
// to date by log-super-update-interval=1).
func logged(t *testing.T, logf string) int {
	t.Helper()
	f, err := os.Open(logf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 24)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return int(binary.LittleEndian.Uint64(b[16:]))
}

// writeSynced writes a file and fsyncs it and its directory.
func writeSynced(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.Create(path)
	if err == nil {
		_, err = f.WriteString(content)
	}
	if err == nil {
		err = f.Sync()
	}
	if f != nil {
		f.Close()
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(filepath.Dir(path)); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

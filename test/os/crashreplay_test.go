package ostest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/logwrites"
	"github.com/volumed/volumed/test/agenttest"
	"github.com/volumed/volumed/test/crashcheck"
)

// The logged volumes: their images live on the dm-log-writes device, with
// the state directory.
var loggedVolumes = []crashcheck.Volume{{Name: "logged", Image: "images/logged.img", Target: "logged"}, {Name: "logged2", Image: "images/logged2.img", Target: "logged2"}}

const proofText = "written and fsynced once the volume was Ready\n"

// loggedManifest is a loop volume with its image under root, mounted
// under mnt (the guest's /crash and /srv, or crashcheck's placeholders).
func loggedManifest(name, size, root, mnt string) string {
	return fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %[1]s}
spec:
  source:
    loop: {file: %[3]s/images/%[1]s.img, create: {size: %[2]s}}
  filesystem: {type: ext4}
  mounts: [{path: %[4]s/%[1]s}]
`, name, size, root, mnt)
}

// crashlogSetup runs before volumed.service: the data disk (an ext4 the
// host made, with state/ and images/) is put under dm-log-writes, its
// log on the second disk, mounted at /crash; /var/lib/volumed is a bind
// of /crash/state. The mark "started" comes before the agent starts.
const crashlogUnit = `[Unit]
Description=ostest: the state directory and two images on dm-log-writes
DefaultDependencies=no
Requires=dev-disk-by\x2did-virtio\x2dCRASHDATA.device dev-disk-by\x2did-virtio\x2dCRASHLOG.device
After=dev-disk-by\x2did-virtio\x2dCRASHDATA.device dev-disk-by\x2did-virtio\x2dCRASHLOG.device local-fs.target
Before=volumed.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/ostest/crashlog-setup.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
`

const crashlogSetup = `#!/bin/sh
. /usr/lib/ostest/lib.sh
set -e
data=/dev/disk/by-id/virtio-CRASHDATA
modprobe dm-log-writes
dmsetup create crashlog --table "0 $(blockdev --getsz $data) log-writes $data /dev/disk/by-id/virtio-CRASHLOG"
mkdir -p /crash /var/lib/volumed
mount /dev/mapper/crashlog /crash
mount --bind /crash/state /var/lib/volumed
dmsetup message crashlog 0 mark started
log "state directory and images on dm-log-writes"
`

// The recording boot's test: once both volumes are Ready it reports their
// filesystems, writes a file into one with fsync (and its directory's),
// and marks the log once that returned; then it powers off.
const crashlogRecord = `
for v in logged logged2; do kv uuid.$v "$(blkid -p -s UUID -o value /crash/images/$v.img)"; done
dmsetup message crashlog 0 mark ready
printf '%s' "$PROOF" >/srv/logged/proof
check "fsync the proof" sync /srv/logged/proof
check "fsync its directory" sync /srv/logged
dmsetup message crashlog 0 mark fsynced
log "log-writes: $(dmsetup status crashlog)"
done_step record
sleep 1
systemctl poweroff
`

// TestCrashReplay is scenario 5 of issue 21: a first boot's whole
// convergence (two loop volumes created and formatted, the state file
// written) on a dm-log-writes device in the guest; then, on the host, the
// agent on every disk a power cut could have left: at each flush and FUA
// write after the agent started, and a seeded sample of what a volatile
// cache could have dropped between flushes (test/crashcheck). Each
// must converge without formatting a filesystem that existed, say so if
// its state file was damaged, and hold the file fsync'd before the mark.
func TestCrashReplay(t *testing.T) {
	t.Parallel()
	img := Base(t)
	seed, max := crashcheck.Knobs(t, 250)
	m := img.NewMachine(t, "crashreplay")
	data := m.AddDisk("CRASHDATA", 1<<30)
	logDisk := m.AddDisk("CRASHLOG", 4<<30)
	base := filepath.Join(m.Dir, "base.img")
	formatData(t, data, base)
	for _, v := range []struct{ name, size string }{{"logged", "64Mi"}, {"logged2", "32Mi"}} {
		m.AddFile("/etc/volumed/volumes.d/"+v.name+".yaml", 0o644, loggedManifest(v.name, v.size, "/crash", "/srv"))
	}
	m.AddFile("/usr/lib/ostest/crashlog-setup.sh", 0o755, crashlogSetup)
	m.AddUnit("crashlog.service", crashlogUnit, "volumed.service")
	m.AddTest("record", afterReady("logged", "logged2"), "PROOF='"+proofText+"'\n"+crashlogRecord)

	ctx := context.Background()
	start := time.Now()
	r := m.Boot(ctx)
	r.WaitDone(t, "record", 5*time.Minute)
	r.Wait(t, 3*time.Minute)
	r.CheckGuest(t)
	t.Logf("recording boot: %s", time.Since(start).Round(100*time.Millisecond))
	if t.Failed() {
		return
	}

	l := readLog(t, logDisk)
	marks := map[string]int{}
	for _, name := range []string{"started", "ready", "fsynced"} {
		i, err := l.Mark(name)
		if err != nil {
			t.Fatal(err)
		}
		marks[name] = i
	}
	t.Logf("log: %d entries, %d flush/FUA points; marks %v", len(l.Entries), len(l.Points()), marks)
	c := crashcheck.Case{
		Bin: hostVolumed(t), Base: base, Log: l, StateDir: "state", Volumes: loggedVolumes,
		Manifests: map[string]string{
			"logged.yaml":  loggedManifest("logged", "64Mi", crashcheck.Root, crashcheck.Mnt),
			"logged2.yaml": loggedManifest("logged2", "32Mi", crashcheck.Root, crashcheck.Mnt),
		},
		Proofs: []crashcheck.Proof{{Volume: "logged", Path: "proof", Content: proofText, After: marks["fsynced"]}},
		Work:   filepath.Join(m.Dir, "replay"), Logf: t.Logf,
	}
	for _, v := range loggedVolumes {
		c.Known = append(c.Known, crashcheck.Known{Volume: v.Name, UUID: r.KV("uuid." + v.Name), After: marks["ready"]})
	}
	if err := os.MkdirAll(c.Work, 0o755); err != nil {
		t.Fatal(err)
	}
	states := crashcheck.Plan(l, marks["started"], seed, max)
	start = time.Now()
	results, err := crashcheck.Run(ctx, c, states)
	if err != nil {
		t.Fatal(err)
	}
	crashcheck.Report(t, results, time.Since(start))
}

// afterReady orders a test unit after the volumes are Ready.
func afterReady(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "Wants=volumed-wait@%[1]s.service\nAfter=volumed-wait@%[1]s.service\n", n)
	}
	return b.String()
}

// formatData makes the logged disk's filesystem (state/ and images/) on
// the host and keeps a copy of it, the replays' starting point.
func formatData(t *testing.T, data, base string) {
	t.Helper()
	skel := t.TempDir()
	for _, d := range []string{"state", "images"} {
		if err := os.Mkdir(filepath.Join(skel, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(skel, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", skel, data).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", data, err, out)
	}
	if err := crashcheck.SparseCopy(base, data); err != nil {
		t.Fatal(err)
	}
}

func readLog(t *testing.T, path string) *logwrites.Log {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	l, err := logwrites.Read(f, fi.Size())
	if err != nil {
		t.Fatalf("the guest's dm-log-writes log: %v", err)
	}
	return l
}

// hostVolumed builds the agent for the host's checks (no race detector:
// hundreds of starts).
func hostVolumed(t *testing.T) string {
	t.Helper()
	bin, err := agenttest.Build(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

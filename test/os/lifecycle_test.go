package ostest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The lifecycle machine's volumes: two local loop images and two network
// volumes whose targets run in the guest behind dummy0 (testdata/targets.sh).
var (
	localVols   = []string{"data", "logs"}
	networkVols = []string{"isc", "nvm"}
)

const (
	targetIQN = "iqn.2026-11.io.ostest:lun"
	targetNQN = "nqn.2026-11.io.ostest:ns"
)

// Generous: the machine running the tests is shared and TCG is slow.
const (
	bootTimeout     = 6 * time.Minute
	shutdownTimeout = 3 * time.Minute
)

// TestLifecycle is one machine through a first boot, a reboot and a
// poweroff, with the shipped units and consumers of local and network
// volumes:
//
//   - boot order (first boot): each consumer starts only once its volumes
//     are Ready and mounted, a consumer of a volume that is never Ready
//     is not started; systemd-analyze critical-chain is logged;
//   - udev in the loop (each boot): with systemd-udevd probing, no
//     operation failed on EBUSY and /dev/disk/by-uuid leads to each
//     volume's device; the agent has its link events;
//   - real reboot: systemctl reboot, the same disk booted again: every
//     volume back with the same filesystem UUID and data, the state file
//     opened clean;
//   - shutdown: systemctl poweroff with the consumers running: consumers
//     stop before their volumes go, network volumes are unmounted and
//     logged out / disconnected before the network goes, in bounded time,
//     and the root filesystem is left clean.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	img := Base(t)
	m := img.NewMachine(t, "lifecycle")
	addLifecycle(t, m)
	ctx := context.Background()

	r1 := m.Boot(ctx)
	t.Run("BootOrder", func(t *testing.T) {
		r1.WaitDone(t, "boot1", bootTimeout)
		r1.CheckGuest(t)
		for _, c := range []struct {
			name string
			vols []string
		}{{"local", localVols}, {"net", networkVols}} {
			for _, v := range c.vols {
				if got := r1.KV(c.name + ".start." + v); got != "Ready" {
					t.Errorf("the %s consumer started while volume %s was %q, want Ready", c.name, v, got)
				}
			}
		}
		if got := r1.KV("small.consumer"); got == "active" || got == "" {
			t.Errorf("the consumer of volume small, which is never Ready, is %q, want not started", got)
		}
		if got := r1.KV("small.wrote"); got != "no" {
			t.Errorf("the consumer of volume small wrote into its mount point on the root filesystem: %q", got)
		}
		// The local volumes are Ready at READY=1, which their wait units
		// start after: each is skipped on the agent's ready mark, with no
		// process. small's has no mark: its volumed wait runs and fails.
		for _, v := range localVols {
			if got := r1.KV("wait.volumed-wait@" + v + ".service"); got != "condition=no result=success" {
				t.Errorf("volumed-wait@%s.service: %q, want skipped on its ready mark (condition=no result=success)", v, got)
			}
		}
		if got := r1.KV("wait.volumed-wait@small.service"); got != "condition=yes result=exit-code" {
			t.Errorf("volumed-wait@small.service: %q, want its volumed wait run and failed (condition=yes result=exit-code)", got)
		}
		marks := strings.Fields(r1.KV("marks"))
		for _, v := range append(slices.Clone(localVols), networkVols...) {
			if !slices.Contains(marks, v) {
				t.Errorf("no ready mark for volume %s, which is Ready (marks %q)", v, marks)
			}
		}
		if slices.Contains(marks, "small") {
			t.Errorf("a ready mark for volume small, which is never Ready (marks %q)", marks)
		}
	})
	r1.Wait(t, shutdownTimeout)
	t.Run("RebootShutdown", func(t *testing.T) {
		checkShutdownJournal(t, m.Offline(t).Journal(t, "-b", "0", "-o", "short-monotonic"), r1)
	})

	r2 := m.Boot(ctx)
	t.Run("Reboot", func(t *testing.T) {
		r2.WaitDone(t, "boot2", bootTimeout)
		r2.CheckGuest(t)
		for _, v := range append(append([]string{}, localVols...), networkVols...) {
			u1, u2 := r1.KV("boot1.uuid."+v), r2.KV("boot2.uuid."+v)
			if u1 == "" || u1 != u2 {
				t.Errorf("volume %s: filesystem UUID %q before the reboot, %q after: formatted again", v, u1, u2)
			}
			s1, s2 := r1.KV("boot1.sum."+v), r2.KV("boot2.sum."+v)
			if s1 == "" || s1 != s2 {
				t.Errorf("volume %s: payload sha256 %q before the reboot, %q after", v, s1, s2)
			}
		}
	})
	asked, _ := r2.waitLine("OSTEST-DONE boot2", time.Second)
	took := r2.Wait(t, shutdownTimeout)
	t.Run("Shutdown", func(t *testing.T) {
		if asked == "" {
			t.Fatal("the guest never asked for the poweroff")
		}
		t.Logf("boot 2 ran %s in all", took.Round(100*time.Millisecond))
		o := m.Offline(t)
		if out, clean := o.Fsck(t); !clean {
			t.Errorf("the root filesystem is not clean after the poweroff:\n%s", out)
		}
		checkShutdownJournal(t, o.Journal(t, "-b", "0", "-o", "short-monotonic"), r2)
	})
}

// checkShutdownJournal checks the order of a shutdown in the guest's
// journal of that boot (short-monotonic): the consumers stopped before
// their volumes were taken down; the network volumes were unmounted,
// logged out and disconnected before the network (dummy0) went down; and
// nothing failed to unmount or remount.
func checkShutdownJournal(t *testing.T, journal string, r *Run) {
	t.Helper()
	lines := strings.Split(journal, "\n")
	// The shutdown starts where the first consumer is stopped.
	start := firstIndex(lines, 0, "Stopping net-consumer.service", "Stopping local-consumer.service")
	if start < 0 {
		t.Fatalf("no shutdown in the journal of boot %d (no consumer was stopped); its end:\n%s", r.n, lastN(journal, 60))
	}
	at := func(what string, subs ...string) int {
		i := firstIndex(lines, start, subs...)
		if i < 0 {
			t.Errorf("shutdown of boot %d: no line for %s (%q) in the journal", r.n, what, subs)
		}
		return i
	}
	netStop := at("the consumer of the network volumes stopped", "Stopped net-consumer.service")
	localStop := at("the consumer of the local volumes stopped", "Stopped local-consumer.service")
	logout := at("the iSCSI logout", "Logout of [sid:", "is shutdown.")
	disconnect := at("the NVMe disconnect", "Removing ctrl: NQN \""+targetNQN)
	netDown := at("the network going down (ifdown dummy0)", "Stopped networking.service", "Deactivated networking.service", "networking.service: Deactivated")
	for _, v := range networkVols {
		i := at("the unmount of /srv/"+v, "srv-"+v+".mount: Deactivated successfully", "Unmounted srv-"+v+".mount")
		before(t, lines, "the consumer stops", netStop, "/srv/"+v+" is unmounted", i)
		before(t, lines, "/srv/"+v+" is unmounted", i, "the network goes", netDown)
	}
	for _, v := range localVols {
		i := at("the unmount of /srv/"+v, "Unmounted srv-"+v+".mount", "srv-"+v+".mount: Deactivated successfully")
		before(t, lines, "the consumer stops", localStop, "/srv/"+v+" is unmounted", i)
	}
	before(t, lines, "the iSCSI logout", logout, "the network goes", netDown)
	before(t, lines, "the NVMe disconnect", disconnect, "the network goes", netDown)
	for _, bad := range []string{"Failed to unmount", "Failed to remount", "failed to unmount", "Failed with result"} {
		for _, l := range lines[start:] {
			if strings.Contains(l, bad) {
				t.Errorf("shutdown of boot %d: %s", r.n, l)
			}
		}
	}
	// systemd-shutdown writes to the console only: journald has stopped.
	for _, l := range r.Lines("Failed to") {
		if containsAny(l, "remount", "unmount", "detach") {
			t.Errorf("shutdown of boot %d, console: %s", r.n, l)
		}
	}
	if t.Failed() {
		p := filepath.Join(t.TempDir(), "journal")
		_ = os.WriteFile(p, []byte(journal), 0o644)
		t.Logf("journal of boot %d from its shutdown on:\n%s", r.n, strings.Join(lines[start:], "\n"))
	}
}

// before fails t unless line i (what) comes before line j (then).
func before(t *testing.T, lines []string, what string, i int, then string, j int) {
	t.Helper()
	if i < 0 || j < 0 {
		return // reported where it was looked for
	}
	if i >= j {
		t.Errorf("%s (%s) after %s (%s), want before", what, lines[i], then, lines[j])
	}
}

// firstIndex is the first line from from on that contains any of subs, or -1.
func firstIndex(lines []string, from int, subs ...string) int {
	for i := max(from, 0); i < len(lines); i++ {
		if containsAny(lines[i], subs...) {
			return i
		}
	}
	return -1
}

// addLifecycle gives m the volumes (addVolumes) and the lifecycle probe.
func addLifecycle(t *testing.T, m *Machine) {
	t.Helper()
	addVolumes(t, m)
	b, err := os.ReadFile(filepath.Join("testdata", "lifecycle.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// A volume that never becomes Ready (mkfs.xfs refuses 64 MiB), its
	// wait cut to 20 s, and a consumer with the documented unit lines:
	// it must not start over the empty mount point.
	m.AddFile("/etc/volumed/volumes.d/small.yaml", 0o644, strings.Replace(loopManifest("small", "/srv/small"), "type: ext4", "type: xfs", 1))
	m.AddFile("/etc/systemd/system/volumed-wait@small.service.d/ostest.conf", 0o644,
		"[Service]\nExecStart=\nExecStart=/usr/bin/volumed wait %i --timeout 20s\n")
	m.AddUnit("small-consumer.service", "[Unit]\nDescription=ostest consumer of a volume that is never Ready\n"+
		waitDeps(t, m.img.Root, "small")+"\n\n[Service]\nType=exec\nExecStart=/usr/lib/ostest/consumer.sh small small\n", "multi-user.target")
	m.AddTest("lifecycle", "After=local-consumer.service net-consumer.service small-consumer.service", string(b))
}

// waitDeps are the [Unit] lines that the comment at the top of
// packaging/systemd/volumed-wait@.service gives a service that needs the
// volume "data", for vols: what an operator copies.
func waitDeps(t *testing.T, root string, vols ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "packaging/systemd/volumed-wait@.service"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		key, ok := strings.CutSuffix(strings.TrimSpace(strings.TrimPrefix(l, "#")), "=volumed-wait@data.service")
		if !ok || !strings.HasPrefix(l, "#") {
			continue
		}
		var units []string
		for _, v := range vols {
			units = append(units, "volumed-wait@"+v+".service")
		}
		out = append(out, key+"="+strings.Join(units, " "))
	}
	if len(out) == 0 {
		t.Fatal("volumed-wait@.service's comment shows no unit lines for a service that needs volume data")
	}
	return strings.Join(out, "\n")
}

// addVolumes gives m its manifests (localVols, networkVols), network
// (dummy0), targets and a consumer of each kind of volume (testdata/).
func addVolumes(t *testing.T, m *Machine) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	m.AddFile("/etc/volumed/volumes.d/data.yaml", 0o644, loopManifest("data", "/srv/data"))
	// xfs wants 300 MB at least.
	m.AddFile("/etc/volumed/volumes.d/logs.yaml", 0o644, strings.NewReplacer("type: ext4", "type: xfs", "64Mi", "320Mi").Replace(loopManifest("logs", "/srv/logs")))
	m.AddFile("/etc/volumed/volumes.d/isc.yaml", 0o644, fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: isc}
spec:
  source:
    iscsi: {portal: "10.99.0.1:3260", iqn: %s, lun: 0}
  filesystem: {type: ext4}
  mounts: [{path: /srv/isc}]
`, targetIQN))
	m.AddFile("/etc/volumed/volumes.d/nvm.yaml", 0o644, fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: nvm}
spec:
  source:
    nvme: {transport: tcp, address: 10.99.0.1, port: 4420, nqn: %s, namespace: 1}
  filesystem: {type: ext4}
  mounts: [{path: /srv/nvm}]
`, targetNQN))
	m.AddFile("/etc/network/interfaces.d/dummy0", 0o644, `auto dummy0
iface dummy0 inet static
	address 10.99.0.1/24
	pre-up ip link add dummy0 type dummy
	post-down ip link del dummy0
`)
	m.AddFile("/usr/lib/ostest/targets.sh", 0o755, read("targets.sh"))
	m.AddDisk("TGTISC", 64<<20)
	m.AddDisk("TGTNVM", 64<<20)
	m.AddUnit("ostest-targets.service", `[Unit]
Description=ostest iSCSI and NVMe/TCP targets on dummy0
DefaultDependencies=no
After=networking.service sys-kernel-config.mount local-fs.target systemd-udevd.service
Wants=networking.service
Before=volumed-network.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/ostest/targets.sh
`, "multi-user.target")
	m.AddFile("/usr/lib/ostest/consumer.sh", 0o755, read("consumer.sh"))
	m.AddUnit("local-consumer.service", `[Unit]
Description=ostest consumer of the local volumes
`+waitDeps(t, m.img.Root, localVols...)+`

[Service]
Type=exec
ExecStart=/usr/lib/ostest/consumer.sh local data logs
`, "multi-user.target")
	m.AddUnit("net-consumer.service", `[Unit]
Description=ostest consumer of the network volumes
`+waitDeps(t, m.img.Root, networkVols...)+`
After=volumed-network.service

[Service]
Type=exec
ExecStart=/usr/lib/ostest/consumer.sh net isc nvm
`, "multi-user.target")
}

package ostest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHarness boots the image once with a loop volume and a probe that
// reports through every console mark, then powers off: the harness's own
// plumbing (seed disk, marks, monitor, offline checks) works.
func TestHarness(t *testing.T) {
	t.Parallel()
	img := Base(t)
	m := img.NewMachine(t, "harness")
	m.AddFile("/etc/volumed/volumes.d/data.yaml", 0o644, loopManifest("data", "/srv/data"))
	m.AddTest("probe", "Wants=volumed-wait@data.service\nAfter=volumed-wait@data.service", `
log "uptime at probe: $(now)"
systemctl is-system-running --wait >/dev/null
log_cmd systemd-analyze blame --no-pager
log_cmd systemd-analyze critical-chain --no-pager probe.service
kv fstype "$(findmnt -no FSTYPE /srv/data)"
findmnt /srv/data >/dev/null || fail "/srv/data is not mounted"
done_step probe
systemctl poweroff
`)
	ctx := context.Background()
	r := m.Boot(ctx)
	r.WaitDone(t, "probe", 5*time.Minute)
	if out, err := r.Monitor("info status"); err != nil || !strings.Contains(out, "running") {
		t.Errorf("monitor: info status = %q, %v; want running", out, err)
	}
	took := r.Wait(t, 3*time.Minute)
	t.Logf("boot to poweroff: %s", took.Round(100*time.Millisecond))
	r.CheckGuest(t)
	if got := r.KV("fstype"); got != "ext4" {
		t.Errorf("the probe saw /srv/data as %q, want ext4", got)
	}
	o := m.Offline(t)
	if out, clean := o.Fsck(t); !clean {
		t.Errorf("root filesystem not clean after poweroff:\n%s", out)
	}
	if j := o.Journal(t, "-u", "volumed.service"); !strings.Contains(j, "volumed") {
		t.Errorf("no volumed.service lines in the guest's journal:\n%s", lastN(j, 20))
	}
}

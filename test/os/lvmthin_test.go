package ostest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// thinFirst makes, before volumed, the VG vgthin on the disk LVMTHIN
// and in it the thin pool pool (128 MiB), which volumed never makes.
const thinFirst = `dev=$(serial_disk LVMTHIN) || exit 1
check pvcreate pvcreate -q "$dev"
check vgcreate vgcreate -q vgthin "$dev"
check "lvcreate pool" lvcreate -q -y --type thin-pool -L 128M -n pool vgthin`

// TestLVMThin is the second slice of issue 24 on a real Debian 12, one
// boot:
//
//   - a thin LV in a thin pool the host made: created by volumed (type
//     thin, in the pool, tagged), formatted and mounted;
//   - online growth: a larger size in the manifest extends the linear LV
//     and grows its filesystem while mounted (data and mount kept); a
//     smaller one is refused with a condition naming both sizes, the LV
//     untouched; an LV extended by a run that stopped before the
//     filesystem grow (volumed stopped, lvextend by hand) is finished
//     when volumed starts again, and after a power cut there (a second
//     boot: the filesystem's own size, not the device's, is recorded at
//     the mount, so the grow is still owed);
//   - health and metrics: the VG's and the pool's gauges on volumed's
//     metrics endpoint; the pool filled past 90% gives SourceDegraded
//     (ThinPoolFull) on the thin volume;
//   - the CSI controller's lvm backend (issue 25, testdata/lvmcsi.sh): the
//     sidecars' sequence over a thin class, GetCapacity before and after,
//     a thin snapshot restored, a linear class without snapshots.
func TestLVMThin(t *testing.T) {
	t.Parallel()
	m := Base(t).NewMachine(t, "lvmthin")
	m.AddDisk("LVMTHIN", 512<<20)
	addVGSetup(m, "vgthin", "the VG vgthin and its thin pool", thinFirst, "")
	addLVMVolume(m, "grow", "volumeGroup: vgthin, size: 32Mi", "type: ext4, grow: true")
	addLVMVolume(m, "thin", "volumeGroup: vgthin, size: 256Mi, type: thin, thinPool: pool", "type: ext4")
	script, err := os.ReadFile(filepath.Join("testdata", "lvmthin.sh"))
	if err != nil {
		t.Fatal(err)
	}
	addLVMCSI(t, m)
	m.AddTest("lvmthin", "Wants=volumed-wait@thin.service\nAfter=volumed-wait@thin.service", string(script))
	r := m.Boot(context.Background())
	// The first boot runs the CSI sidecars' whole sequence and fills a
	// pool besides: at host load 5 it was still filling at 6 min (the
	// guest had 42 % of a core), and bootTimeout bounds a hang, not speed.
	r.Finish(t, "thin", 2*bootTimeout) // a power cut: the LV extended, its filesystem not
	r.CheckGuest(t)
	r2 := m.Boot(context.Background())
	r2.Finish(t, "thin2", bootTimeout)
	r2.CheckGuest(t)
	expect := func(t *testing.T, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got := r.KV(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
	}
	t.Run("Thin", func(t *testing.T) {
		expect(t, map[string]string{"thin.phase": "Ready", "thin.segtype": "thin", "thin.pool": "pool", "thin.tags": "volumed:thin",
			"thin.size": "268435456", "thin.fstype": "ext4"})
	})
	t.Run("Grow", func(t *testing.T) {
		expect(t, map[string]string{"grow.before.lvsize": "33554432", "grow.lvsize": "67108864", "grow.phase": "Ready", "grow.fsgrew": "yes"})
		for _, k := range []string{"sum", "mountid"} {
			if a, b := r.KV("grow.before."+k), r.KV("grow."+k); a == "" || a != b {
				t.Errorf("%s before the grow %q, after %q: want the same (data intact, not remounted)", k, a, b)
			}
		}
	})
	t.Run("Shrink", func(t *testing.T) {
		expect(t, map[string]string{"shrink.reason": "ShrinkRefused", "shrink.lvsize": "67108864", "shrink.names": "yes"})
	})
	t.Run("CrashBetween", func(t *testing.T) {
		// The LV at 96 MiB, its filesystem fitted to 64 MiB when volumed
		// started: the grow is finished from the kernel's sizes.
		expect(t, map[string]string{"crash.lvsize": "100663296", "crash.fsgrew": "yes", "crash.phase": "Ready"})
		if a, b := r.KV("grow.mountid"), r.KV("crash.mountid"); a == "" || a != b {
			t.Errorf("mount ID %q before the restart, %q after", a, b)
		}
	})
	t.Run("PowerCutBetween", func(t *testing.T) {
		before, err1 := strconv.ParseInt(r.KV("cut.fssize"), 10, 64)
		after, err2 := strconv.ParseInt(r2.KV("cut.fssize"), 10, 64)
		if err1 != nil || err2 != nil || after <= before {
			t.Errorf("the filesystem of grow was %q bytes at the power cut (its LV extended to 128 MiB), %q after the reboot: want it grown", r.KV("cut.fssize"), r2.KV("cut.fssize"))
		}
		if got := r2.KV("cut.lvsize"); got != "134217728" {
			t.Errorf("LV grow after the reboot: %q bytes, want 134217728", got)
		}
	})
	t.Run("Metrics", func(t *testing.T) {
		expect(t, map[string]string{"metrics.vgsize": "yes", "metrics.pooldata": "yes", "metrics.poolmeta": "yes"})
	})
	t.Run("CSI", func(t *testing.T) { checkLVMCSI(t, r) })
	t.Run("PoolFull", func(t *testing.T) {
		pct, err := strconv.ParseFloat(r.KV("full.datapct"), 64)
		if err != nil || pct < 90 {
			t.Errorf("the pool's data after the fill: %q%%, want past 90 (the test filled it short)", r.KV("full.datapct"))
		}
		expect(t, map[string]string{"full.reason": "ThinPoolFull", "full.phase": "Degraded", "full.metric": "yes"})
	})
}

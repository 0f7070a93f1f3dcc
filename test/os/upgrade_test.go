package ostest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestUpgrade installs a newer build of the package with dpkg -i while
// every volume is Ready and mounted and their consumers run: the agent
// restarts on the new binary, and nothing is unmounted or remounted (the
// volumes' mount IDs are the same), no network volume is taken down, the
// consumers keep running and the volumes stay Ready.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	img := Base(t)
	ctx := context.Background()
	deb, err := img.Deb(ctx, "v0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	m := img.NewMachine(t, "upgrade")
	addVolumes(t, m)
	m.AddFile("/var/cache/ostest/volumed-new.deb", 0o644, string(b))
	script, err := os.ReadFile(filepath.Join("testdata", "upgrade.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m.AddTest("upgrade", "After=local-consumer.service net-consumer.service", string(script))
	r := m.Boot(ctx)
	// The harness's monitor, while the guest runs.
	if out, err := r.Monitor("info status"); err != nil || !strings.Contains(out, "running") {
		t.Errorf("monitor: info status = %q, %v; want running", out, err)
	}
	r.Finish(t, "upgrade", bootTimeout+3*time.Minute)
	r.CheckGuest(t)
	if got := r.KV("version.before"); !strings.Contains(got, baseVersion) {
		t.Errorf("before the upgrade volumed version says %q, want %s", got, baseVersion)
	}
	if got := r.KV("version.after"); !strings.Contains(got, "v0.2.0") {
		t.Errorf("after dpkg -i volumed version says %q, want v0.2.0", got)
	}
	if got := r.KV("agent.restarted"); got != "yes" {
		t.Errorf("the agent restarted on the upgrade: %q, want yes (the old binary would keep running)", got)
	}
	// The ready marks: every volume's before; none once the agent is
	// killed (systemd removes the directory, not the dead agent); every
	// volume's again after the restart.
	all := append(append([]string{}, localVols...), networkVols...)
	for _, k := range []string{"marks.before", "marks.after"} {
		if got := strings.Fields(r.KV(k)); !sameSet(got, all) {
			t.Errorf("%s: ready marks %q, want one for each of %q", k, got, all)
		}
	}
	if got := r.KV("marks.killed"); got != "gone" {
		t.Errorf("/run/volumed/ready once the agent was killed: %q, want gone (RuntimeDirectory=)", got)
	}
	if got := r.KV("agent.binary"); got != "/usr/bin/volumed" {
		t.Errorf("the agent runs %q after the upgrade, want /usr/bin/volumed (not a deleted old file)", got)
	}
	for _, v := range append(append([]string{}, localVols...), networkVols...) {
		if got := r.KV("after.phase." + v); got != "Ready" {
			t.Errorf("volume %s is %q after the upgrade, want Ready", v, got)
		}
	}
}

// sameSet: a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

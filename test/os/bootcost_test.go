package ostest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The boot-cost benchmark (issue 21): the same image with benchVols
// pre-formatted ext4 loop images mounted by volumed, and by /etc/fstab's
// loop option, several boots of each alternating in one run.
const (
	benchVols   = 20
	benchSizeMi = 16
)

// Targets from the issue: volumed over fstab.
const (
	targetConsumer = 1.03 // (a) uptime when the consumer of all volumes starts
	targetMount    = 1.20 // (b) the mount phase alone
)

// bootSample is one measured boot, in seconds of guest CLOCK_MONOTONIC.
type bootSample struct {
	consumer float64 // (a) the consumer's main process started
	uptime   float64 // (a) /proc/uptime read by the consumer's first line
	mount    float64 // (b) the mount phase
	extra    string  // what else the guest reported (waits, agent log)
}

// TestBootCost is a benchmark, not a test: it runs only with
// VOLUMED_BENCH_BOOT=1 (make bench-boot; VOLUMED_BENCH_BOOTS=N boots of
// each, default 3). It asserts nothing about time (the machine is shared);
// it fails only when a boot does not reach its consumer.
func TestBootCost(t *testing.T) {
	if os.Getenv("VOLUMED_BENCH_BOOT") != "1" {
		t.Skip("a benchmark: runs only with VOLUMED_BENCH_BOOT=1 (make bench-boot)")
	}
	boots := 3
	if s := os.Getenv("VOLUMED_BENCH_BOOTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("VOLUMED_BENCH_BOOTS=%q: want a positive number", s)
		}
		boots = n
	}
	img := Base(t)
	ctx := context.Background()
	vm := benchMachine(t, img, "volumed")
	fm := benchMachine(t, img, "fstab")
	// VOLUMED_BENCH_ONEWAIT=1 adds a third machine: the consumer after
	// one unit that waits for all 20 at once (one volumed wait process,
	// not 20), to show what the per-volume wait units cost.
	var om *Machine
	if os.Getenv("VOLUMED_BENCH_ONEWAIT") == "1" {
		om = benchMachine(t, img, "onewait")
	}
	var vs, fs, os1 []bootSample
	load := []string{hostLoad()}
	for i := range boots {
		vs = append(vs, benchBoot(t, ctx, vm, i+1))
		fs = append(fs, benchBoot(t, ctx, fm, i+1))
		if om != nil {
			os1 = append(os1, benchBoot(t, ctx, om, i+1))
		}
		load = append(load, hostLoad())
	}
	if om != nil {
		var xs []float64
		for _, s := range os1 {
			xs = append(xs, s.consumer)
		}
		t.Logf("one wait unit for all %d: consumer started at median %.2f s", benchVols, median(xs))
	}
	// Where the agent's time went in its last boot: its own log, with
	// the guest's monotonic stamps, and the wait units'.
	t.Logf("volumed's journal of its last boot (volumed.service, volumed-wait@):\n%s",
		vm.Offline(t).Journal(t, "-b", "0", "-o", "short-monotonic", "-u", "volumed.service", "-u", "volumed-wait@*"))
	reportBootCost(t, vs, fs, load)
}

// benchVolNames are v01..v20.
func benchVolNames() []string {
	var out []string
	for i := 1; i <= benchVols; i++ {
		out = append(out, fmt.Sprintf("v%02d", i))
	}
	return out
}

// benchMachine is a machine whose first boot (not measured) makes the
// images with mkfs.ext4 and then puts in place what mounts them: the
// manifests (kind "volumed") or the fstab lines (kind "fstab"), so that
// every measured boot finds the same disk and no seed.
func benchMachine(t *testing.T, img *Image, kind string) *Machine {
	t.Helper()
	m := img.NewMachine(t, "bench-"+kind)
	vols := benchVolNames()
	var mounts []string
	for _, v := range vols {
		mounts = append(mounts, "/srv/"+v)
		switch kind {
		case "volumed", "onewait":
			m.AddFile("/usr/lib/ostest/bench/"+v+".yaml", 0o644, fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source:
    loop: {file: /var/lib/ostest/%s.img}
  filesystem: {type: ext4}
  mounts: [{path: /srv/%s}]
`, v, v, v))
		}
	}
	var unit string
	switch kind {
	case "volumed":
		// What volumed-wait@.service's comment tells an operator to write.
		unit = waitDeps(t, img.Root, vols...)
	case "onewait":
		m.AddUnit("bench-wait.service", "[Unit]\nDescription=ostest wait for all bench volumes\nAfter=volumed.service\nWants=volumed.service\n\n"+
			"[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/bin/volumed wait "+strings.Join(vols, " ")+" --timeout 5m\n")
		unit = "Requires=bench-wait.service\nAfter=bench-wait.service"
	default:
		var fstab strings.Builder
		// The loop driver is a module in Debian's kernel: a mount unit
		// is not ordered after its loading by itself, and with the
		// image's remount-fs masked the mounts came first and failed.
		for _, v := range vols {
			fmt.Fprintf(&fstab, "/var/lib/ostest/%s.img /srv/%s ext4 loop,x-systemd.requires=modprobe@loop.service 0 0\n", v, v)
		}
		m.AddFile("/usr/lib/ostest/bench/fstab", 0o644, fstab.String())
		unit = "After=local-fs.target\nRequiresMountsFor=" + strings.Join(mounts, " ")
	}
	// VOLUMED_BENCH_INITTRACE=1: the agent logs its package inits
	// (GODEBUG=inittrace=1) to the journal the benchmark prints.
	if os.Getenv("VOLUMED_BENCH_INITTRACE") == "1" {
		m.AddFile("/etc/systemd/system/volumed.service.d/inittrace.conf", 0o644, "[Service]\nEnvironment=GODEBUG=inittrace=1\n")
	}
	m.AddFile("/usr/lib/ostest/bench/kind", 0o644, kind+"\n")
	m.AddFile("/usr/lib/ostest/bench/vols", 0o644, strings.Join(vols, " ")+"\n")
	m.AddFile("/usr/lib/ostest/bench/size", 0o644, fmt.Sprintf("%dM\n", benchSizeMi))
	read := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The first boot prepares; every later one measures.
	m.AddTest("benchprep", "ConditionPathExists=!/var/lib/ostest/bench-prepared", read("bootprep.sh"))
	m.AddTest("bench", unit+"\nConditionPathExists=/var/lib/ostest/bench-prepared", read("bootcost.sh"))
	r := m.Boot(context.Background())
	r.WaitDone(t, "prepared", bootTimeout)
	r.CheckGuest(t)
	r.Wait(t, shutdownTimeout)
	return m
}

// benchBoot boots m once and reads what the guest measured.
func benchBoot(t *testing.T, ctx context.Context, m *Machine, n int) bootSample {
	t.Helper()
	r := m.Boot(ctx)
	r.WaitDone(t, "measured", bootTimeout)
	r.CheckGuest(t)
	r.Wait(t, shutdownTimeout)
	num := func(k string) float64 {
		f, err := strconv.ParseFloat(r.KV(k), 64)
		if err != nil {
			t.Fatalf("%s boot %d: value %s = %q: %v", m.Name, n, k, r.KV(k), err)
		}
		return f
	}
	s := bootSample{consumer: num("consumer"), uptime: num("uptime"), mount: num("mount"), extra: r.KV("extra")}
	t.Logf("%s boot %d: consumer started at %.2f s (uptime %.2f s), mount phase %.2f s; %s",
		m.Name, n, s.consumer, s.uptime, s.mount, s.extra)
	return s
}

func hostLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// reportBootCost logs each boot, the medians and the ratios against the
// targets.
func reportBootCost(t *testing.T, vs, fs []bootSample, load []string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "boot cost, %d ext4 loop images of %d MiB, %d boots each (host load before and after each pair: %s)\n",
		benchVols, benchSizeMi, len(vs), strings.Join(load, " | "))
	fmt.Fprintf(&b, "%-5s %-22s %-22s %-22s %-22s\n", "boot", "(a) volumed", "(a) fstab", "(b) volumed", "(b) fstab")
	for i := range vs {
		fmt.Fprintf(&b, "%-5d %-22s %-22s %-22s %-22s\n", i+1,
			fmt.Sprintf("%.2f s", vs[i].consumer), fmt.Sprintf("%.2f s", fs[i].consumer),
			fmt.Sprintf("%.3f s", vs[i].mount), fmt.Sprintf("%.3f s", fs[i].mount))
	}
	pick := func(ss []bootSample, f func(bootSample) float64) float64 {
		var xs []float64
		for _, s := range ss {
			xs = append(xs, f(s))
		}
		return median(xs)
	}
	ca, cf := pick(vs, func(s bootSample) float64 { return s.consumer }), pick(fs, func(s bootSample) float64 { return s.consumer })
	ma, mf := pick(vs, func(s bootSample) float64 { return s.mount }), pick(fs, func(s bootSample) float64 { return s.mount })
	fmt.Fprintf(&b, "%-5s %-22s %-22s %-22s %-22s\n", "med", fmt.Sprintf("%.2f s", ca), fmt.Sprintf("%.2f s", cf),
		fmt.Sprintf("%.3f s", ma), fmt.Sprintf("%.3f s", mf))
	fmt.Fprintf(&b, "(a) consumer of all %d starts, volumed/fstab: %s\n", benchVols, verdict(ca, cf, targetConsumer))
	fmt.Fprintf(&b, "(b) mount phase, volumed/fstab: %s\n", verdict(ma, mf, targetMount))
	b.WriteString("(a): the consumer's ExecMainStartTimestampMonotonic; (b) volumed: volumed.service's main process " +
		"started to READY=1 (all volumes Ready); fstab: the first of the mount units left inactive to local-fs.target active")
	t.Log("\n" + b.String())
}

func verdict(v, f, target float64) string {
	if f <= 0 {
		return "no fstab figure"
	}
	r := v / f
	met := "met"
	if r > target {
		met = "NOT met"
	}
	return fmt.Sprintf("%.3fx (target <= %.2fx: %s)", r, target, met)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

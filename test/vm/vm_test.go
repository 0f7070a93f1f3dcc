// Package vm runs volumed in a qemu VM whose kernel has what the test
// machine's lacks: the NVMe/TCP host and target, the iSCSI initiator and
// the LIO target, SCSI and virtio disks. The VM is Debian's kernel with a
// busybox initramfs; each scenario in scenarios/ is a busybox sh script
// that sets up targets on the VM's own network, drives the real volumed
// binary through manifests, and reports a result line on the console.
//
// Knobs (environment):
//
//	VOLUMED_VM_CACHE      downloads, extracted kernel, base image, what each scenario
//	                      took when it last passed (default <repo>/.cache/vm)
//	VOLUMED_VM_SCENARIOS  comma-separated subset to run (default: all)
//	VOLUMED_VM_PARALLEL   VMs booted at once (default: 2 on 2+ CPUs)
//	VOLUMED_VM_BINARY     a volumed to test instead of building one (crash points needed)
//	VOLUMED_VM_ACCEL      tcg (default) or kvm
//	VOLUMED_VM_KEEP       keep the console logs (<cache>/logs) when all passed
package vm

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/testtool"
)

// scenario is one script in scenarios/, with what its header asks for:
//
//	# vmtest: timeout=150 disks tpm
//
// disks gives the VM its local disks; tpm gives it a TPM2 (a software
// TPM on the host, one per VM boot, attached as a TIS device).
type scenario struct {
	name    string
	path    string
	timeout time.Duration
	disks   bool
	tpm     bool
}

const defaultScenarioTimeout = 120 * time.Second

// missing fails under make test or CI, where scripts/deps.sh installs
// everything, and skips elsewhere.
func missing(t *testing.T, what string, err error) {
	t.Helper()
	testtool.Missing(t, what, "see scripts/deps.sh", err)
}

func loadScenarios(dir string) ([]scenario, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.sh"))
	if err != nil {
		return nil, err
	}
	var out []scenario
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sh")
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		s := scenario{name: name, path: f, timeout: defaultScenarioTimeout}
		for _, line := range strings.Split(string(b), "\n") {
			opts, ok := strings.CutPrefix(line, "# vmtest:")
			if !ok {
				continue
			}
			for _, o := range strings.Fields(opts) {
				switch k, v, _ := strings.Cut(o, "="); k {
				case "timeout":
					n, err := strconv.Atoi(v)
					if err != nil || n <= 0 {
						return nil, fmt.Errorf("%s: # vmtest: timeout=%q is not a number of seconds", f, v)
					}
					s.timeout = time.Duration(n) * time.Second
				case "disks":
					s.disks = true
				case "tpm":
					s.tpm = true
				default:
					return nil, fmt.Errorf("%s: # vmtest: unknown option %q", f, o)
				}
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// selectScenarios applies VOLUMED_VM_SCENARIOS.
func selectScenarios(all []scenario, only string) ([]scenario, error) {
	if only == "" {
		return all, nil
	}
	var out []scenario
	for _, n := range strings.Split(only, ",") {
		i := slices.IndexFunc(all, func(s scenario) bool { return s.name == n })
		if i < 0 {
			return nil, fmt.Errorf("VOLUMED_VM_SCENARIOS names %q, which is not in scenarios/", n)
		}
		if slices.ContainsFunc(out, func(s scenario) bool { return s.name == n }) {
			return nil, fmt.Errorf("VOLUMED_VM_SCENARIOS names %q twice", n)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// buildVolumed builds the static binary with crash points compiled in.
func buildVolumed(ctx context.Context, root, dir string) (string, error) {
	if p := os.Getenv("VOLUMED_VM_BINARY"); p != "" {
		return p, nil
	}
	out := filepath.Join(dir, "volumed")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "crashpoints", "-trimpath", "-ldflags", "-s -w",
		"-o", out, "./cmd/volumed")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build volumed: %w\n%s", err, b)
	}
	return out, nil
}

// buildHelpers builds the test-only commands the scenarios run besides
// volumed (vmluks drives drivers/luks, vmcsi the CSI node service),
// static, into dir.
func buildHelpers(ctx context.Context, root, dir string) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range []string{"vmluks", "vmcsi"} {
		bin := filepath.Join(dir, name)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./test/vm/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build %s: %w\n%s", name, err, b)
		}
		out[name] = bin
	}
	return out, nil
}

// overlay is the per-run archive appended to the base image: /init, the
// scenario library and scripts, and volumed. The kernel unpacks both
// archives into one root, this one last.
func overlay(guestDir string, ss []scenario, volumed string, helpers map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	c := newCPIO(&buf)
	c.copyFile("init", filepath.Join(guestDir, "init"), 0o755)
	c.copyFile("vmtest/lib.sh", filepath.Join(guestDir, "lib.sh"), 0o644)
	for _, s := range ss {
		c.copyFile("vmtest/scenarios/"+s.name+".sh", s.path, 0o644)
	}
	c.copyFile("usr/local/bin/volumed", volumed, 0o755)
	for _, name := range keys(helpers) {
		c.copyFile("usr/local/bin/"+name, helpers[name], 0o755)
	}
	if err := c.close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func TestVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots qemu VMs, which -short asks to leave out (make test and CI never pass -short)")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		missing(t, "qemu-system-x86_64 (qemu-system-x86)", err)
	}
	for _, tool := range []string{"modprobe", "depmod", "dpkg", "apt-get", "ldd"} {
		if _, err := hostTool(tool); err != nil {
			missing(t, tool, err)
		}
	}
	if _, err := staticBusybox(); err != nil {
		missing(t, "a static busybox (busybox-static)", err)
	}
	for _, tool := range guestTools {
		if _, err := hostTool(tool); err != nil {
			missing(t, tool+" (copied into the VM)", err)
		}
	}
	root := testtool.ModuleRoot(t)
	here := filepath.Join(root, "test/vm")
	all, err := loadScenarios(filepath.Join(here, "scenarios"))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := selectScenarios(all, os.Getenv("VOLUMED_VM_SCENARIOS"))
	if err != nil {
		t.Fatal(err)
	}
	if needTPM(ss) {
		if _, err := exec.LookPath("swtpm"); err != nil {
			missing(t, "swtpm (the VM's TPM2)", err)
		}
	}
	cache := cmp.Or(os.Getenv("VOLUMED_VM_CACHE"), filepath.Join(root, ".cache/vm"))

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	k, base, err := prepare(ctx, cache)
	if err != nil {
		t.Fatalf("prepare the VM in %s: %v", cache, err)
	}
	tmp := t.TempDir()
	bin, err := buildVolumed(ctx, root, tmp)
	if err != nil {
		t.Fatal(err)
	}
	helpers, err := buildHelpers(ctx, root, tmp)
	if err != nil {
		t.Fatal(err)
	}
	ov, err := overlay(filepath.Join(here, "guest"), ss, bin, helpers)
	if err != nil {
		t.Fatal(err)
	}
	baseBytes, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(tmp, "initramfs.cpio")
	if err := os.WriteFile(initrd, append(baseBytes, ov...), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s (%s), initramfs %.1f MiB, ready in %s", k.version, filepath.Base(k.boot),
		float64(len(baseBytes)+len(ov))/(1<<20), time.Since(start).Round(100*time.Millisecond))

	parallel := 1
	if runtime.NumCPU() >= 2 {
		parallel = 2
	}
	if v := os.Getenv("VOLUMED_VM_PARALLEL"); v != "" {
		if parallel, err = strconv.Atoi(v); err != nil || parallel < 1 {
			t.Fatalf("VOLUMED_VM_PARALLEL=%q: want a positive number", v)
		}
	}
	vms := max(1, min(parallel, len(ss)))
	cfg := bootConfig{
		kernel: k.boot, initrd: initrd, accel: cmp.Or(os.Getenv("VOLUMED_VM_ACCEL"), "tcg"),
		smp: max(1, min(2, runtime.NumCPU()/vms)), memMB: 1024, diskDir: tmp,
	}
	// Console logs are kept when something failed, one dir per run: runs
	// may share the cache.
	if err := os.MkdirAll(filepath.Join(cache, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	logDir, err := os.MkdirTemp(filepath.Join(cache, "logs"), time.Now().Format("20060102-150405-"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("VOLUMED_VM_KEEP") == "" {
			os.RemoveAll(logDir)
		}
	})
	bootAndReport(ctx, t, cfg, ss, vms, logDir, cache)
}

// needTPM: some scenario of ss wants the VM to have a TPM.
func needTPM(ss []scenario) bool {
	return slices.ContainsFunc(ss, func(s scenario) bool { return s.tpm })
}

// bootAndReport boots vms VMs at once, which share out the scenarios of
// ss as each asks for its next one, and reports every scenario as a
// subtest. Every VM can run every scenario: each has the disks and the
// TPM if any scenario wants them.
func bootAndReport(ctx context.Context, t *testing.T, cfg bootConfig, ss []scenario, vms int, logDir, cache string) {
	type outcome struct {
		plan vmPlan
		con  *console
		err  error
		took time.Duration
	}
	q := newQueue(ss, readDurations(durationsPath(cache)))
	outcomes := make([]outcome, vms)
	var wg sync.WaitGroup
	for i := range vms {
		plan := vmPlan{id: i, log: filepath.Join(logDir, fmt.Sprintf("console-%d.log", i))}
		plan.disks = slices.ContainsFunc(ss, func(s scenario) bool { return s.disks })
		plan.tpm = needTPM(ss)
		wg.Go(func() {
			t0 := time.Now()
			con, err := boot(ctx, cfg, plan, q, func(r *result) {
				t.Logf("vm%d: %s %s in %.1fs %s", plan.id, r.name, passFail(r.passed), r.seconds, r.detail)
			})
			outcomes[i] = outcome{plan: plan, con: con, err: err, took: time.Since(t0)}
		})
	}
	wg.Wait()

	passed := map[string]float64{}
	for _, o := range outcomes {
		if o.con != nil {
			for name, r := range o.con.results {
				if r.passed {
					passed[name] = r.seconds
				}
			}
		}
	}
	if err := recordDurations(cache, passed); err != nil {
		t.Logf("the scenarios' durations were not kept (the next run hands them out by timeout): %v", err)
	}
	for _, o := range outcomes {
		names := q.takenBy(o.plan.id)
		var cpu time.Duration
		if o.con != nil {
			cpu = o.con.cpu
		}
		t.Logf("vm%d (%s): %s wall, qemu CPU %.1f s", o.plan.id, strings.Join(names, ","),
			o.took.Round(100*time.Millisecond), cpu.Seconds())
		if o.err != nil {
			t.Errorf("%v; console tail:\n%s", o.err, tail(o.plan.log, 40))
		}
	}
	for _, s := range ss {
		vm, ok := q.ranOn(s.name)
		if !ok {
			t.Run(s.name, func(t *testing.T) {
				t.Fatal("no VM took this scenario: every VM ended before it was handed out")
			})
			continue
		}
		o := outcomes[vm]
		t.Run(s.name, func(t *testing.T) {
			var r *result
			if o.con != nil {
				r = o.con.results[s.name]
			}
			switch {
			case r == nil:
				t.Fatalf("vm%d never started this scenario (console log %s)", o.plan.id, o.plan.log)
			case !r.ended:
				t.Fatalf("vm%d ended during this scenario (console log %s); its output:\n%s",
					o.plan.id, o.plan.log, lastLines(r.lines, 80))
			case !r.passed:
				t.Fatalf("FAIL after %.1fs in the VM: %s\nits output (console log %s):\n%s",
					r.seconds, r.detail, o.plan.log, lastLines(r.lines, 120))
			}
			t.Logf("PASS in %.1fs in the VM", r.seconds)
			// What the scenario measured (latencies, costs) outlives
			// the console log, which a pass deletes.
			for _, l := range r.lines {
				if i := strings.Index(l, "VMTEST-LOG "); i >= 0 {
					t.Log(l[i+len("VMTEST-LOG "):])
				}
			}
		})
	}
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func lastLines(lines []string, n int) string {
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

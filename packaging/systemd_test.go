package packaging_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/testtool"
	"github.com/volumed/volumed/kinds"
)

const (
	agentUnit    = "systemd/volumed.service"
	networkUnit  = "systemd/volumed-network.service"
	waitUnit     = "systemd/volumed-wait@.service"
	tmpfilesConf = "tmpfiles/volumed.conf"
)

var units = []string{agentUnit, networkUnit, waitUnit}

// namespaceOptions set up a file system (or other) namespace for a unit,
// or otherwise keep the agent from mounting for the host. systemd.exec(5):
// every file system namespace option turns the unit's mounts into slaves
// of the host's, so what the agent mounts would never reach the host
// (TestSandboxedMountsDoNotReachTheHost shows the kernel side of it).
var namespaceOptions = map[string]string{
	"PrivateMounts": "", "ProtectSystem": "", "ProtectHome": "", "PrivateTmp": "", "PrivateDevices": "",
	"ReadOnlyPaths": "", "ReadWritePaths": "", "InaccessiblePaths": "", "ExecPaths": "", "NoExecPaths": "",
	"TemporaryFileSystem": "", "BindPaths": "", "BindReadOnlyPaths": "", "ProtectKernelTunables": "",
	"ProtectKernelModules": "", "ProtectKernelLogs": "", "ProtectControlGroups": "", "ProtectProc": "",
	"ProcSubset": "", "MountAPIVFS": "", "RootDirectory": "", "RootImage": "", "MountImages": "",
	"ExtensionImages": "", "ExtensionDirectories": "", "LogNamespace": "", "DynamicUser": "",
	"MountFlags":           "only matters inside a namespace",
	"PrivateNetwork":       "iSCSI and NVMe-oF need the host's network",
	"NetworkNamespacePath": "iSCSI and NVMe-oF need the host's network",
	"PrivateUsers":         "mounting for the host needs the host's root",
	"ProtectClock":         "implies a device allow-list",
	"DeviceAllow":          "the devices manifests name are not known in advance",
	"DevicePolicy":         "the devices manifests name are not known in advance",
}

// readyDir is where the agent keeps its ready marks (volumed run's
// --ready-dir with the default socket), which the wait unit tests.
const readyDir = "/run/volumed/ready"

func TestUnitsKeepTheHostMountNamespace(t *testing.T) {
	for _, path := range units {
		u := loadUnit(t, path)
		for section, keys := range u {
			for k := range keys {
				if why, bad := namespaceOptions[k]; bad {
					if why == "" {
						why = "it gives the unit its own mount namespace"
					}
					t.Errorf("%s: [%s] %s= is not allowed: %s", path, section, k, why)
				}
			}
		}
	}
	u := loadUnit(t, agentUnit)
	// systemd removes a RuntimeDirectory= when the unit stops: the ready
	// marks' may go (that is what it is for), /run/volumed (the socket,
	// the runtime manifests) must not.
	for _, d := range u.words("Service", "RuntimeDirectory") {
		if "/run/"+d != readyDir {
			t.Errorf("%s: RuntimeDirectory=%s: systemd removes it when the agent stops; only %s may go", agentUnit, d, readyDir)
		}
	}
	if p := u.value("Service", "RuntimeDirectoryPreserve"); p != "" && p != "no" {
		t.Errorf("%s: RuntimeDirectoryPreserve=%s keeps ready marks past the agent that made them", agentUnit, p)
	}
	caps := u.words("Service", "CapabilityBoundingSet")
	for _, c := range []string{"CAP_SYS_ADMIN", "CAP_DAC_OVERRIDE", "CAP_CHOWN", "CAP_FOWNER"} {
		if !slices.Contains(caps, c) {
			t.Errorf("%s: CapabilityBoundingSet lacks %s, which mounting and creating images need", agentUnit, c)
		}
	}
	for _, f := range u.words("Service", "RestrictAddressFamilies") {
		if strings.HasPrefix(f, "~") {
			t.Errorf("%s: RestrictAddressFamilies is a deny-list; want an allow-list", agentUnit)
		}
	}
}

const (
	mountChildEnv = "VOLUMED_TEST_MOUNT_CHILD"
	reshareEnv    = "VOLUMED_TEST_MOUNT_RESHARE"
)

// mountChild runs in a process unshare(1) started in a new mount
// namespace; with reshare it first does systemd's last sandbox step,
// MountFlags= (shared unless set), then mounts a tmpfs at target.
func mountChild(target string, reshare bool) error {
	if reshare {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
			return fmt.Errorf("make / rshared: %w", err)
		}
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", 0, "size=64k"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", target, err)
	}
	return nil
}

// TestSandboxedMountsDoNotReachTheHost is why volumed.service has none of
// the namespace options. systemd.exec(5), PrivateMounts= and MountFlags=:
// a unit with any of them runs in a new mount namespace whose mounts are
// all made slaves, then set to MountFlags= (shared by default). This test
// does the same on the real kernel, under a shared mount standing for the
// host's / (which systemd makes shared at boot), and looks from the
// "host" for the mount the "agent" made.
func TestSandboxedMountsDoNotReachTheHost(t *testing.T) {
	unshare := needTool(t, "unshare", "util-linux")
	host := filepath.Join(t.TempDir(), "host")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", host, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(host, unix.MNT_DETACH) })
	if err := unix.Mount("", host, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name, propagation string
		reshare, reaches  bool
	}{
		// The control: without the slave step the mount does propagate,
		// so the cases below are not blind.
		{"new namespace, propagation left shared", "unchanged", false, true},
		{"systemd sandbox, MountFlags= unset or shared", "slave", true, false},
		{"systemd sandbox, MountFlags=slave", "slave", false, false},
	} {
		target := filepath.Join(host, fmt.Sprint(i))
		if err := os.Mkdir(target, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(unshare, "--mount", "--propagation", c.propagation, "--", os.Args[0])
		cmd.Env = append(os.Environ(), mountChildEnv+"="+target)
		if c.reshare {
			cmd.Env = append(cmd.Env, reshareEnv+"=1")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, out)
		}
		got, err := mountinfo.Mounted(target)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.reaches {
			t.Errorf("%s: the mount reaches the host: %v, want %v", c.name, got, c.reaches)
		}
	}
}

func seconds(t *testing.T, path, v string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(v, "min", "m"), " ", ""))
	if err != nil {
		t.Fatalf("%s: cannot read duration %q: %v", path, v, err)
	}
	return d
}

// TestUnitOrdering checks what start-up, reload and shutdown rely on.
func TestUnitOrdering(t *testing.T) {
	a := loadUnit(t, agentUnit)
	for _, kv := range [][3]string{
		{"Service", "Type", "notify"},
		{"Service", "ExecStart", "/usr/bin/volumed run"},
		{"Service", "ExecReload", "/bin/kill -HUP $MAINPID"},
		{"Service", "Restart", "on-failure"},
		{"Service", "KillMode", "mixed"}, // SIGTERM to the agent alone: running mkfs finishes
		{"Unit", "DefaultDependencies", "no"},
		{"Install", "WantedBy", "sysinit.target"},
	} {
		if got := a.value(kv[0], kv[1]); got != kv[2] {
			t.Errorf("%s: %s= %q, want %q", agentUnit, kv[1], got, kv[2])
		}
	}
	if a.value("Service", "WatchdogSec") == "" {
		t.Errorf("%s: no WatchdogSec=", agentUnit)
	}
	if d := seconds(t, agentUnit, a.value("Service", "TimeoutStopSec")); d <= 20*time.Second {
		t.Errorf("%s: TimeoutStopSec=%v does not leave the agent its 20 s grace", agentUnit, d)
	}
	if !slices.Contains(a.words("Unit", "After"), "local-fs.target") || !slices.Contains(a.words("Unit", "Before"), "sysinit.target") {
		t.Errorf("%s: want After=local-fs.target and Before=sysinit.target (local volumes Ready before services start)", agentUnit)
	}
	for _, key := range []string{"After", "Wants", "Requires"} {
		for _, dep := range a.words("Unit", key) {
			if strings.HasPrefix(dep, "network") {
				t.Errorf("%s: %s=%s would hold local volumes back until the network is up", agentUnit, key, dep)
			}
		}
	}

	n := loadUnit(t, networkUnit)
	after := n.words("Unit", "After")
	for _, dep := range []string{"volumed.service", "network-online.target", "network.target", "iscsid.service"} {
		if !slices.Contains(after, dep) {
			t.Errorf("%s: not After=%s, so its ExecStop would not run before that stops", networkUnit, dep)
		}
	}
	if !slices.Contains(n.words("Unit", "Wants"), "network-online.target") {
		t.Errorf("%s: no Wants=network-online.target", networkUnit)
	}
	// A restart of the agent must not restart (and so stop) this unit.
	for _, key := range []string{"Requires", "BindsTo", "PartOf", "Requisite", "Upholds"} {
		if slices.Contains(n.words("Unit", key), "volumed.service") {
			t.Errorf("%s: %s=volumed.service carries a restart of the agent over and takes network volumes down", networkUnit, key)
		}
	}
	// Its start only undoes a manual stop: it must never take anything down.
	if n.value("Service", "Type") != "oneshot" || n.value("Service", "RemainAfterExit") != "yes" ||
		n.value("Service", "ExecStart") != "/usr/bin/volumed shutdown --network --undo" {
		t.Errorf("%s: want Type=oneshot, RemainAfterExit=yes and ExecStart=/usr/bin/volumed shutdown --network --undo", networkUnit)
	}
	stop := strings.Fields(n.value("Service", "ExecStop"))
	i := slices.Index(stop, "--timeout")
	if len(stop) < 3 || stop[0] != "/usr/bin/volumed" || stop[1] != "shutdown" || !slices.Contains(stop, "--network") || i < 0 || i+1 >= len(stop) {
		t.Fatalf("%s: ExecStop=%q, want /usr/bin/volumed shutdown --network --timeout D", networkUnit, stop)
	}
	if limit, cmd := seconds(t, networkUnit, n.value("Service", "TimeoutStopSec")), seconds(t, networkUnit, stop[i+1]); limit <= cmd {
		t.Errorf("%s: TimeoutStopSec=%v kills the shutdown before its own --timeout %v", networkUnit, limit, cmd)
	}

	w := loadUnit(t, waitUnit)
	if got := strings.Fields(w.value("Service", "ExecStart")); len(got) < 3 || got[1] != "wait" || got[2] != "%i" {
		t.Errorf("%s: ExecStart=%q, want volumed wait %%i", waitUnit, got)
	}
	if !slices.Contains(w.words("Unit", "After"), "volumed.service") {
		t.Errorf("%s: not After=volumed.service", waitUnit)
	}
}

// The wait unit is skipped, with no process, while the agent's mark says
// the volume is usable; the condition's "!" keeps the wait for every
// other case. systemd removes the marks with the agent's runtime dir.
func TestWaitUnitReadyMark(t *testing.T) {
	w := loadUnit(t, waitUnit)
	if got, want := w.value("Unit", "ConditionPathExists"), "!"+readyDir+"/%i"; got != want {
		t.Errorf("%s: ConditionPathExists=%q, want %q", waitUnit, got, want)
	}
	if !slices.Contains(loadUnit(t, agentUnit).words("Service", "RuntimeDirectory"), strings.TrimPrefix(readyDir, "/run/")) {
		t.Errorf("%s: no RuntimeDirectory=%s: a mark would outlive an agent killed and not restarted", agentUnit, strings.TrimPrefix(readyDir, "/run/"))
	}
}

// hostUnitDir is where this host's systemd keeps its own units, which
// systemd-analyze verify needs to resolve ours against.
func hostUnitDir(t *testing.T) string {
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, "sysinit.target")); err == nil {
			return d
		}
	}
	testtool.Missing(t, "systemd's units (sysinit.target)", "Debian: systemd", os.ErrNotExist)
	return ""
}

// TestUnitsVerify runs systemd-analyze verify on the units installed in a
// copy of this host's unit tree: unknown keys, bad values, missing
// programs and ordering cycles all fail it.
func TestUnitsVerify(t *testing.T) {
	analyze := needTool(t, "systemd-analyze", "systemd")
	root := t.TempDir()
	dir := filepath.Join(root, "usr/lib/systemd/system")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", hostUnitDir(t), dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the host's units: %v\n%s", err, out)
	}
	// Only that they are executables is checked.
	for _, prog := range []string{"usr/bin/volumed", "bin/kill"} {
		p := filepath.Join(root, prog)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"volumed-wait@data.service"}
	for _, u := range units {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(u)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(u, "@.service") {
			names = append(names, filepath.Base(u))
		}
	}
	// verify returns the lines about our units (verify reports unknown
	// keys and ordering cycles but exits 0 all the same) and all it said.
	verify := func(names ...string) (ours, all string) {
		args := append([]string{"verify", "--man=no", "--root=" + root}, names...)
		out, err := exec.Command(analyze, args...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%v\n%s", err, out), string(out)
		}
		var lines []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "volumed") {
				lines = append(lines, line)
			}
		}
		return strings.Join(lines, "\n"), string(out)
	}
	if out, _ := verify(names...); out != "" {
		t.Errorf("systemd-analyze verify %s:\n%s", strings.Join(names, " "), out)
	}

	// The controls: a misspelt key and a cycle with local-fs.target are seen.
	network := mustRead(t, networkUnit)
	for name, c := range map[string]struct{ unit, want string }{
		"volumed-typo.service":  {strings.Replace(network, "TimeoutStopSec=", "TimeoutStopSecs=", 1), "TimeoutStopSecs"},
		"volumed-cycle.service": {strings.Replace(network, "[Unit]\n", "[Unit]\nBefore=local-fs.target\n", 1), "ordering cycle"},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(c.unit), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, out := verify("volumed.service", name); !strings.Contains(out, c.want) {
			t.Errorf("verify of %s did not report %q:\n%s", name, c.want, out)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestTmpfilesMakeDirectoriesTheAgentAccepts applies the tmpfiles.d entry
// under a temp root and hands the result to the agent's own drop-in
// directory checks (root-owned, not writable by group or others).
func TestTmpfilesMakeDirectoriesTheAgentAccepts(t *testing.T) {
	tmpfiles := needTool(t, "systemd-tmpfiles", "systemd")
	conf, err := filepath.Abs(tmpfilesConf)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if out, err := exec.Command(tmpfiles, "--create", "--root="+root, conf).CombinedOutput(); err != nil {
		t.Fatalf("systemd-tmpfiles --create: %v\n%s", err, out)
	}
	want := map[string]os.FileMode{
		"etc/volumed/volumes.d": 0o755, "run/volumed/volumes.d": 0o755,
		"etc/volumed/secrets": 0o700, "var/lib/volumed": 0o700,
	}
	for p, mode := range want {
		st, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Errorf("tmpfiles did not make /%s: %v", p, err)
			continue
		}
		if !st.IsDir() || st.Mode().Perm() != mode {
			t.Errorf("/%s: %v, want a directory of mode %04o", p, st.Mode(), mode)
		}
	}
	var dirs []string
	for _, d := range manifest.DefaultDirs() {
		if !strings.HasPrefix(d, "/usr/") { // the package's, checked in TestPackages
			dirs = append(dirs, filepath.Join(root, d))
		}
	}
	// A manifest in each, so the file checks run through the directory checks.
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "x.yaml"), []byte("# empty\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := manifest.Options{CheckOwnership: true, Kinds: kinds.Manifest(kinds.All())}
	files, probs := manifest.EffectiveFiles(dirs, opts)
	if len(files) == 1 {
		_, ps := manifest.ParseFile(files[0], opts)
		probs = append(probs, ps...)
	}
	if len(probs) > 0 || len(files) != 1 {
		t.Errorf("the agent refuses the directories tmpfiles made: %v (files %v)", probs, files)
	}
}

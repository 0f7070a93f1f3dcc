package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/api"
)

// Hostile manifests and a hostile filesystem under the targets. Each case
// is refused with a clear reason, nothing is mounted outside what a
// manifest names, and a bystander volume is never disturbed.

// bystander declares a volume that every hostile case must leave alone.
func (e *env) bystander() {
	e.t.Helper()
	e.volume("bystander", "ext4", "64Mi", "bystander")
}

func (e *env) assertBystanderUntouched(ids []int) {
	e.t.Helper()
	got := e.mountIDs()[e.target("bystander")]
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		e.t.Errorf("bystander's target mount IDs changed: %v -> %v", ids, got)
	}
	if v := find(e.waitReady("bystander"), "bystander"); v.LastError != "" {
		e.t.Errorf("bystander has an error: %s", v.LastError)
	}
}

// noMountUnder fails if anything is mounted at or below dir.
func (e *env) noMountUnder(dir string) {
	e.t.Helper()
	for p := range e.mounts() {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			e.t.Errorf("something was mounted at %s, under %s", p, dir)
		}
	}
}

func TestHostileTargetsAndSubPaths(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(e.dir, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	// A target whose parent is a symlink to a directory outside.
	if err := os.Symlink(outside, e.target("link")); err != nil {
		t.Fatal(err)
	}
	e.bystander()
	e.volume("via-link", "ext4", "64Mi", "link/data")
	// A subPath that is a symlink inside the volume pointing out, and
	// one made of "..".
	e.volume("holder", "ext4", "64Mi")
	e.write("escape.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Mount
metadata: {name: escape}
spec: {volume: holder, path: %s, subPath: esc}
`, e.target("escape")))
	e.write("dotdot.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Mount
metadata: {name: dotdot}
spec: {volume: holder, path: %s, subPath: ../..}
`, e.target("dotdot")))
	// Targets on the kernel's and volumed's own trees.
	e.write("proc.yaml", "apiVersion: volumed/v1\nkind: Mount\nmetadata: {name: proc}\nspec: {volume: holder, path: /proc/sys}\n")
	e.write("state.yaml", fmt.Sprintf("apiVersion: volumed/v1\nkind: Mount\nmetadata: {name: state}\nspec: {volume: holder, path: %s}\n", filepath.Join(e.state, "x")))
	e.start()
	e.waitReady("bystander")
	ids := e.mountIDs()[e.target("bystander")]

	v := e.waitPhase("via-link", api.PhaseError)
	if !strings.Contains(v.LastError, "symlink") {
		t.Errorf("via-link: error %q does not say symlink", v.LastError)
	}
	e.noMountUnder(outside)

	// Plant the escaping symlink in the holder's filesystem, then let the
	// Mount try.
	e.waitFor("holder staged", func(st *api.Status) bool {
		_, err := os.Stat(filepath.Join(e.staging("holder"), "lost+found"))
		return err == nil
	})
	if err := os.Symlink("../../../../../../../../..", filepath.Join(e.staging("holder"), "esc")); err != nil {
		t.Fatal(err)
	}
	e.waitFor("escape refused", func(st *api.Status) bool {
		v := find(st, "holder")
		return v != nil && strings.Contains(v.LastError, "symlink")
	})
	if ms := e.mounts()[e.target("escape")]; len(ms) != 0 {
		t.Errorf("a symlinked subPath was mounted: %+v", ms[0])
	}
	st, _ := e.status()
	problems := strings.Join(st.Problems, "\n")
	for _, want := range []string{
		`dotdot.yaml:4:`, `spec.subPath: must not contain ".."`,
		`proc.yaml:4:`, `spec.path: must not be /proc or under it`,
		`state.yaml:4:`, `must not be the state dir`,
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems lack %q:\n%s", want, problems)
		}
	}
	e.noMountUnder(e.target("dotdot"))
	e.assertBystanderUntouched(ids)
}

func TestHostileManifestFiles(t *testing.T) {
	e := newEnv(t)
	e.bystander()
	// World-writable: refused with its mode named.
	e.volume("loose", "ext4", "64Mi", "loose")
	if err := os.Chmod(filepath.Join(e.config, "loose.yaml"), 0o666); err != nil {
		t.Fatal(err)
	}
	// An alias bomb (billion laughs): refused at once, memory bounded.
	var bomb strings.Builder
	bomb.WriteString("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 'b'; i <= 'j'; i++ {
		fmt.Fprintf(&bomb, "%c: &%c [*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	e.write("bomb.yaml", bomb.String())
	// Deep nesting.
	e.write("deep.yaml", strings.Repeat("[", 10000)+strings.Repeat("]", 10000)+"\n")
	e.start()
	st := e.waitReady("bystander")
	ids := e.mountIDs()[e.target("bystander")]
	problems := strings.Join(st.Problems, "\n")
	for _, want := range []string{
		"loose.yaml: refused: mode 0666 lets group or others write it",
		"bomb.yaml:", "deep.yaml:",
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems lack %q:\n%s", want, problems)
		}
	}
	if find(st, "loose") != nil || len(e.mounts()[e.target("loose")]) != 0 {
		t.Error("the world-writable manifest's volume was set up")
	}
	if hwm := peakRSS(t, e.running().Pid()); hwm > 100<<20 {
		t.Errorf("peak RSS %d MiB after the alias bomb", hwm>>20)
	}
	e.assertBystanderUntouched(ids)
}

// A secret never leaves its file: not in logs, status, metrics, the
// state file or the agent's command line. A secret file others can read
// is refused.
func TestSecretsStayInTheirFiles(t *testing.T) {
	const known = "Kn0wn-S3cret-Str1ng"
	e := newEnv(t)
	addr := freeAddr(t)
	e.extraArgs = []string{"--metrics-address", addr, "--log-level", "debug"}
	secrets := filepath.Join(e.dir, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"good": 0o600, "loose": 0o644} {
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p, []byte(known+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	chap := func(name, file string, lun int) string {
		return fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source:
    iscsi: {portal: "127.0.0.1:1", iqn: "iqn.2026-01.io.example:none", lun: %d,
            chap: {username: u, passwordFile: %s, mutualUsername: m, mutualPasswordFile: %s}}
  filesystem: {type: ext4}
`, name, lun, file, file)
	}
	e.write("good.yaml", chap("good", filepath.Join(secrets, "good"), 0))
	e.write("loose.yaml", chap("loose", filepath.Join(secrets, "loose"), 1))
	e.bystander()
	e.start()
	e.waitReady("bystander")
	// The good one is tried (and fails: no target listens here).
	st := e.waitFor("the chap volume tried", func(st *api.Status) bool {
		v := find(st, "good")
		return v != nil && v.LastError != ""
	})
	problems := strings.Join(st.Problems, "\n")
	if !strings.Contains(problems, "loose.yaml") || !strings.Contains(problems, "mode 0644") {
		t.Errorf("the 0644 secret file was not refused:\n%s", problems)
	}
	if find(st, "loose") != nil {
		t.Error("a volume with a readable secret was accepted")
	}
	stJSON, _ := json.Marshal(st)
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(e.running().Pid()) + "/cmdline")
	metrics := scrape(t, addr)
	e.stop()
	e.waitExit(30e9)
	state, err := os.ReadFile(filepath.Join(e.state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{
		"log": e.logText(), "status": string(stJSON), "metrics": metrics, "state file": string(state), "cmdline": string(cmdline),
	} {
		if strings.Contains(text, known) {
			t.Errorf("the secret appears in the %s", where)
		}
	}
}

func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n << 10
		}
	}
	return 0
}

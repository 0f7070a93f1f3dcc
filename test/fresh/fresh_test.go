// Package fresh is the fresh-machine test (issue 21, scenario 9): on a
// minimal Debian root, scripts/deps.sh test must bring every program the
// suite runs and every library those programs load at run time, as the
// registry in internal/testtool lists them. A machine that already had a
// package (CI's, a developer's) cannot see what deps.sh forgot; this
// root can.
//
//	VOLUMED_FRESH_CACHE   the base tarball and apt's downloads (default <repo>/.cache/fresh)
package fresh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

func TestMain(m *testing.M) { testns.Main(m) }

func TestDepsBringsEverythingTheSuiteNeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the suite's packages into a new Debian root, which -short leaves out (make test and CI never pass -short)")
	}
	testtool.Need(t, "Debian: mmdebstrap", "mmdebstrap")
	testtool.Need(t, "Debian: coreutils, tar", "chroot", "tar")
	repo := testtool.ModuleRoot(t)
	cache := cacheDir(t, repo)
	start := time.Now()
	tarball := baseTarball(t, cache)
	root := newRoot(t, tarball, cache)
	t.Logf("root unpacked (%s) after %s", sizeOf(tarball), time.Since(start).Round(time.Second))

	deps, err := os.ReadFile(filepath.Join(repo, "scripts/deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "tmp/deps.sh"), deps, 0o755)
	depsStart := time.Now()
	out, code := inRoot(t, root, "bash", "/tmp/deps.sh", "test")
	if code != 0 {
		t.Fatalf("deps.sh test on a fresh %s root: exit %d\n%s", suite, code, tail(out, 40))
	}
	t.Logf("deps.sh test installed in %s", time.Since(depsStart).Round(time.Second))
	if out, code := inRoot(t, root, "bash", "/tmp/deps.sh", "test"); code != 0 || out != "" {
		t.Errorf("deps.sh test run again: exit %d, output %q; want quiet success once all is there", code, tail(out, 10))
	}

	checkTools(t, root)
	checkLibraries(t, root)
	checkSystemdTPM2(t, root)
	t.Logf("fresh-machine check took %s", time.Since(start).Round(time.Second))
}

// checkTools: every program of the registry that deps.sh is to bring is
// on the root's PATH.
func checkTools(t *testing.T, root string) {
	t.Helper()
	var script strings.Builder
	n := 0
	for _, tl := range testtool.Tools() {
		if tl.Where != testtool.Deps {
			continue
		}
		n++
		script.WriteString("command -v '" + tl.Name + "' >/dev/null || echo '" + tl.Name + " (" + tl.Package + ")'\n")
	}
	out, code := inRoot(t, root, "sh", "-c", script.String())
	if code != 0 || out != "" {
		t.Errorf("after deps.sh, the fresh root lacks programs the suite runs (registry: internal/testtool/tools.go):\n%s", out)
	}
	t.Logf("%d programs checked", n)
}

// checkLibraries: every library a tool dlopens loads in the root, by the
// root's own dynamic loader (dlopen through python3's ctypes, as
// systemd's dlopen would find it).
func checkLibraries(t *testing.T, root string) {
	t.Helper()
	var script strings.Builder
	script.WriteString("import ctypes\nfor name, pkg, tool in [\n")
	libs := testtool.Libraries()
	for _, l := range libs {
		script.WriteString("    ('" + l.Soname + "', '" + l.Package + "', '" + l.For + "'),\n")
	}
	script.WriteString(`]:
    try:
        ctypes.CDLL(name)
    except OSError as e:
        print(f"{name} ({pkg}, loaded by {tool}): {e}")
`)
	out, code := inRoot(t, root, "python3", "-c", script.String())
	if code != 0 || out != "" {
		t.Errorf("after deps.sh, libraries the suite's tools load at run time do not load in the fresh root (exit %d):\n%s", code, out)
	}
	t.Logf("%d run-time libraries checked", len(libs))
}

// checkSystemdTPM2: what the user saw on a fresh Debian 12 (issue 21),
// asked of the tool itself. Listing TPM2 devices loads tpm2-tss; without
// it systemd says its TPM2 support is not installed.
func checkSystemdTPM2(t *testing.T, root string) {
	t.Helper()
	out, _ := inRoot(t, root, "systemd-cryptenroll", "--tpm2-device=list")
	if strings.Contains(out, "not installed") || strings.Contains(out, "not available") {
		t.Errorf("systemd-cryptenroll --tpm2-device=list in the fresh root after deps.sh:\n%s", out)
	}
}

// tail is the last n lines of s: apt's output is long, its end says why.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

package packaging_test

import (
	"context"
	"debug/elf"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkStatic reports why the ELF file at path is not a static executable:
// a program interpreter (the dynamic loader) or a dynamic section.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			return fmt.Errorf("%s has a program interpreter (PT_INTERP): it needs the dynamic loader", path)
		case elf.PT_DYNAMIC:
			return fmt.Errorf("%s has a PT_DYNAMIC segment", path)
		}
	}
	if f.Section(".interp") != nil || f.Section(".dynamic") != nil {
		return fmt.Errorf("%s has an .interp or .dynamic section", path)
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %v", path, libs)
	}
	return nil
}

// TestCheckStaticRefusesDynamicBinaries: the check sees what it must.
func TestCheckStaticRefusesDynamicBinaries(t *testing.T) {
	n := 0
	for _, prog := range []string{"sh", "ls", "make"} {
		path, err := exec.LookPath(prog)
		if err != nil {
			continue
		}
		n++
		if err := checkStatic(path); err == nil {
			t.Errorf("checkStatic(%s) passes a dynamically linked program", path)
		}
	}
	if n == 0 {
		t.Fatal("none of sh, ls, make found: the check has nothing to be tested against")
	}
}

// TestBuiltBinary builds cmd/volumed the way `make build` does and checks
// the binary, the unit's shutdown command against it, and the packages
// `make package` makes of it.
func TestBuiltBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "volumed")
	makeBuild(t, bin)

	t.Run("static", func(t *testing.T) {
		if err := checkStatic(bin); err != nil {
			t.Error(err)
		}
	})

	// The ExecStop of volumed-network.service, run by the binary with no
	// agent up (an empty /run): the flags exist and it succeeds, so a
	// poweroff with the agent already gone is not a failed unit.
	for _, key := range []string{"ExecStart", "ExecStop"} {
		t.Run("network unit "+key, func(t *testing.T) {
			withRun(t, false)
			argv := strings.Fields(loadUnit(t, networkUnit).value("Service", key))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, argv[1:]...).CombinedOutput()
			if err != nil {
				t.Errorf("%s (%s of %s) with no agent running: %v\n%s", strings.Join(argv, " "), key, networkUnit, err, out)
			}
		})
	}

	t.Run("packages", func(t *testing.T) { testPackages(t, bin) })
}

type entry struct {
	mode  fs.FileMode
	owner string
	size  int64
}

func testPackages(t *testing.T, bin string) {
	dpkgDeb := needTool(t, "dpkg-deb", "dpkg")
	rpm := needTool(t, "rpm", "rpm")
	dist := filepath.Join(t.TempDir(), "dist")
	// The first run compiles nfpm (about a minute); later runs reuse it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "make", "-s", "-C", "..", "package", "PACKAGE_BIN="+bin, "DIST="+dist).CombinedOutput()
	if err != nil {
		t.Fatalf("make package: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("make package made %v and %v, want one .deb and one .rpm", debs, rpms)
	}

	// What is shipped, from where, with which mode.
	files := map[string]string{
		"/usr/bin/volumed":                                  bin,
		"/usr/lib/systemd/system/volumed.service":           agentUnit,
		"/usr/lib/systemd/system/volumed-network.service":   networkUnit,
		"/usr/lib/systemd/system/volumed-wait@.service":     waitUnit,
		"/usr/lib/tmpfiles.d/volumed.conf":                  tmpfilesConf,
		"/usr/lib/modules-load.d/volumed.conf":              "modules-load/volumed.conf",
		"/usr/share/volumed/volumed-manifest.schema.json":   "schema/volumed-manifest.schema.json",
		"/usr/share/volumed/prometheus/volumed-alerts.yaml": rulesFile,
		"/usr/share/volumed/grafana/volumed-dashboard.json": dashboardFile,
		"/usr/share/man/man8/volumed.8":                     "man/volumed.8",
		"/usr/share/man/man5/volumed.yaml.5":                "man/volumed.yaml.5",
		"/usr/share/bash-completion/completions/volumed":    "completion/volumed.bash",
	}
	// Where each distribution's zsh looks for completions.
	zshCompletion := map[string]string{"deb": "/usr/share/zsh/vendor-completions/_volumed", "rpm": "/usr/share/zsh/site-functions/_volumed"}
	examples, _ := filepath.Glob("examples/*.yaml")
	if len(examples) == 0 {
		t.Fatal("no examples")
	}
	for _, e := range examples {
		files["/usr/share/volumed/examples/"+filepath.Base(e)] = e
	}
	dirs := map[string]fs.FileMode{
		"/usr/lib/volumed/volumes.d": 0o755,
		"/etc/volumed/volumes.d":     0o755,
		"/etc/volumed/secrets":       0o700,
		"/var/lib/volumed":           0o700,
	}

	for _, pkg := range []struct {
		file    string
		entries map[string]entry
	}{
		{debs[0], debEntries(t, dpkgDeb, debs[0])},
		{rpms[0], rpmEntries(t, rpm, rpms[0])},
	} {
		name := filepath.Base(pkg.file)
		files := maps.Clone(files)
		files[zshCompletion[strings.TrimPrefix(filepath.Ext(name), ".")]] = "completion/_volumed"
		for dst, src := range files {
			st, err := os.Stat(src)
			if err != nil {
				t.Fatal(err)
			}
			want := os.FileMode(0o644)
			if dst == "/usr/bin/volumed" {
				want = 0o755
			}
			got, ok := pkg.entries[dst]
			switch {
			case !ok:
				t.Errorf("%s: no %s", name, dst)
			case got.mode != want || got.owner != "root/root" || got.size != st.Size():
				t.Errorf("%s: %s is %v %s %d bytes, want %v root/root %d bytes (%s)", name, dst, got.mode, got.owner, got.size, want, st.Size(), src)
			}
		}
		for dst, perm := range dirs {
			want := fs.ModeDir | perm
			if got, ok := pkg.entries[dst]; !ok || got.mode != want || got.owner != "root/root" {
				t.Errorf("%s: %s is %v %s (present: %v), want an empty directory %v root/root", name, dst, got.mode, got.owner, ok, want)
			}
			for p := range pkg.entries {
				if strings.HasPrefix(p, dst+"/") {
					t.Errorf("%s: %s is shipped inside %s, which must be empty", name, p, dst)
				}
			}
		}
		for p := range pkg.entries {
			if p == "/run" || strings.HasPrefix(p, "/run/") {
				t.Errorf("%s: ships %s; /run is a tmpfs, made by tmpfiles.d", name, p)
			}
		}
	}

	// The maintainer scripts are in both, as written.
	ctl := t.TempDir()
	if out, err := exec.Command(dpkgDeb, "-e", debs[0], ctl).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -e: %v\n%s", err, out)
	}
	rpmScripts, err := exec.Command(rpm, "-qp", "--scripts", rpms[0]).Output()
	if err != nil {
		t.Fatalf("rpm -qp --scripts: %v", err)
	}
	for deb, src := range map[string]string{"postinst": "scripts/postinstall.sh", "prerm": "scripts/preremove.sh", "postrm": "scripts/postremove.sh"} {
		want := mustRead(t, src)
		got, err := os.ReadFile(filepath.Join(ctl, deb))
		if err != nil || strings.TrimSpace(string(got)) != strings.TrimSpace(want) {
			t.Errorf("%s: %s is not %s (%v)", filepath.Base(debs[0]), deb, src, err)
		}
		if !strings.Contains(string(rpmScripts), strings.TrimSpace(want)) {
			t.Errorf("%s: no scriptlet with %s", filepath.Base(rpms[0]), src)
		}
	}
}

func outputLines(t *testing.T, prog string, args ...string) []string {
	t.Helper()
	out, err := exec.Command(prog, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", prog, strings.Join(args, " "), err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// debEntries reads `dpkg-deb -c`: "drwxr-xr-x root/root 0 2026-01-01 00:00 ./etc/".
func debEntries(t *testing.T, dpkgDeb, deb string) map[string]entry {
	t.Helper()
	entries := map[string]entry{}
	for _, line := range outputLines(t, dpkgDeb, "-c", deb) {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c: unexpected line %q", line)
		}
		size, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("dpkg-deb -c: unexpected line %q", line)
		}
		p := "/" + strings.Trim(strings.TrimPrefix(f[5], "."), "/")
		entries[p] = entry{mode: parsePerms(f[0]), owner: f[1], size: size}
	}
	return entries
}

// parsePerms reads an ls-style mode string; only directories and regular
// files are shipped.
func parsePerms(s string) fs.FileMode {
	var m fs.FileMode
	if len(s) != 10 {
		return fs.ModeIrregular
	}
	if s[0] == 'd' {
		m |= fs.ModeDir
	} else if s[0] != '-' {
		m |= fs.ModeIrregular
	}
	for i, c := range s[1:] {
		if c != '-' {
			m |= 1 << (8 - i)
		}
	}
	return m
}

// rpmEntries reads `rpm -qlp --dump`: path size mtime digest mode owner
// group isconfig isdoc rdev symlink.
func rpmEntries(t *testing.T, rpm, pkg string) map[string]entry {
	t.Helper()
	entries := map[string]entry{}
	for _, line := range outputLines(t, rpm, "-qlp", "--dump", pkg) {
		f := strings.Fields(line)
		if len(f) < 7 {
			t.Fatalf("rpm --dump: unexpected line %q", line)
		}
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		raw, err2 := strconv.ParseUint(f[4], 8, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("rpm --dump: unexpected line %q", line)
		}
		m := fs.FileMode(raw & 0o777)
		switch raw & 0o170000 {
		case 0o040000:
			m |= fs.ModeDir
			size = 0 // rpm gives a directory the size of a block
		case 0o100000:
		default:
			m |= fs.ModeIrregular
		}
		entries[f[0]] = entry{mode: m, owner: f[5] + "/" + f[6], size: size}
	}
	return entries
}

func TestParsePerms(t *testing.T) {
	for s, want := range map[string]fs.FileMode{"drwx------": fs.ModeDir | 0o700, "-rw-r--r--": 0o644, "-rwxr-x--x": 0o751} {
		if got := parsePerms(s); got != want {
			t.Errorf("parsePerms(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestMaintainerScripts runs the scripts with a fake systemctl that
// records its calls, with and without a running systemd (an empty /run
// stands for an image build, which has none), for .deb and .rpm arguments.
func TestMaintainerScripts(t *testing.T) {
	const (
		enable   = "systemctl enable volumed.service volumed-network.service"
		disable  = "systemctl disable volumed.service volumed-network.service"
		reload   = "systemctl daemon-reload"
		tmpfiles = "systemd-tmpfiles --create volumed.conf"
	)
	cases := []struct {
		name, script string
		args         []string
		running      bool
		noSystemd    bool
		want         []string
	}{
		{"deb install in an image build", "postinstall.sh", []string{"configure"}, false, false, []string{tmpfiles, enable}},
		{"rpm install in an image build", "postinstall.sh", []string{"1"}, false, false, []string{tmpfiles, enable}},
		{"deb install on a running host", "postinstall.sh", []string{"configure"}, true, false,
			[]string{tmpfiles, reload, enable, "systemctl --no-block start volumed.service volumed-network.service"}},
		{"deb upgrade on a running host", "postinstall.sh", []string{"configure", "0.9"}, true, false,
			[]string{tmpfiles, reload, "systemctl try-restart volumed.service"}},
		{"rpm upgrade on a running host", "postinstall.sh", []string{"2"}, true, false,
			[]string{tmpfiles, reload, "systemctl try-restart volumed.service"}},
		{"deb upgrade in an image build", "postinstall.sh", []string{"configure", "0.9"}, false, false, []string{tmpfiles}},
		{"install without systemd at all", "postinstall.sh", []string{"configure"}, false, true, nil},
		{"deb abort-upgrade", "postinstall.sh", []string{"abort-upgrade", "1.0"}, true, false, nil},
		{"deb removal on a running host", "preremove.sh", []string{"remove"}, true, false,
			[]string{"systemctl stop volumed-network.service", "systemctl stop volumed.service", disable}},
		{"rpm removal in an image build", "preremove.sh", []string{"0"}, false, false, []string{disable}},
		{"deb upgrade, old prerm", "preremove.sh", []string{"upgrade", "1.1"}, true, false, nil},
		{"rpm upgrade, old preun", "preremove.sh", []string{"1"}, true, false, nil},
		{"deb purge on a running host", "postremove.sh", []string{"purge"}, true, false, []string{reload}},
		{"rpm erase in an image build", "postremove.sh", []string{"0"}, false, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			withRun(t, c.running)
			dir := t.TempDir()
			fakebin := filepath.Join(dir, "bin")
			if err := os.Mkdir(fakebin, 0o755); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, "calls")
			var progs []string
			if !c.noSystemd {
				progs = []string{"systemd-tmpfiles", "systemctl"}
			}
			for _, p := range progs {
				fake := fmt.Sprintf("#!/bin/sh\necho \"%s $*\" >> \"$VOLUMED_FAKE_LOG\"\n", p)
				if err := os.WriteFile(filepath.Join(fakebin, p), []byte(fake), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			script, err := filepath.Abs(filepath.Join("scripts", c.script))
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/bin/sh", append([]string{script}, c.args...)...)
			// Only the fakes: a real systemctl or systemd-tmpfiles would act on this host.
			cmd.Env = []string{"PATH=" + fakebin, "VOLUMED_FAKE_LOG=" + log}
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s %v: %v\n%s", c.script, c.args, err, out)
			}
			data, err := os.ReadFile(log)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			var got []string
			if s := strings.TrimSpace(string(data)); s != "" {
				got = strings.Split(s, "\n")
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s %v ran:\n  %s\nwant:\n  %s", c.script, c.args, strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
			for _, call := range got {
				if !c.running && (strings.Contains(call, "start") || strings.Contains(call, "stop") || strings.Contains(call, "reload")) {
					t.Errorf("%s %v without a running systemd: %s", c.script, c.args, call)
				}
				if strings.Contains(call, "restart") && strings.Contains(call, "volumed-network") {
					t.Errorf("%s %v: %s takes the network volumes down", c.script, c.args, call)
				}
			}
		})
	}
}

// packageVersion is the version `make package` gives the packages for a
// `git describe` output.
func packageVersion(t *testing.T, describe string) string {
	t.Helper()
	out, err := exec.Command("make", "-s", "-n", "-C", "..", "package", "VERSION="+describe, "PACKAGE_BIN=/nonexistent", "DIST=/nonexistent").Output()
	if err != nil {
		t.Fatalf("make -n package: %v", err)
	}
	_, rest, ok := strings.Cut(string(out), "VOLUMED_VERSION='")
	v, _, ok2 := strings.Cut(rest, "'")
	if !ok || !ok2 {
		t.Fatalf("make -n package sets no VOLUMED_VERSION:\n%s", out)
	}
	return v
}

// TestPackageVersions: every build gets a version dpkg and rpm order
// right, so that an upgrade is an upgrade.
func TestPackageVersions(t *testing.T) {
	dpkg := needTool(t, "dpkg", "dpkg")
	rpm := needTool(t, "rpm", "rpm")
	// In upgrade order.
	describes := []string{"475125c-dirty", "v0.1.0", "v1.2.3", "v1.2.3-4-gabc1234", "v1.2.3-4-gabc1234-dirty", "v1.2.4"}
	var versions []string
	for _, d := range describes {
		v := packageVersion(t, d)
		if strings.ContainsAny(v, "- ") || v == "" || v[0] < '0' || v[0] > '9' {
			t.Errorf("git describe %s gives package version %q: not a valid deb and rpm version", d, v)
		}
		versions = append(versions, v)
	}
	for i := 0; i+1 < len(versions); i++ {
		a, b := versions[i], versions[i+1]
		if err := exec.Command(dpkg, "--compare-versions", a, "lt", b).Run(); err != nil {
			t.Errorf("dpkg orders %s (%s) before %s (%s): not so", a, describes[i], b, describes[i+1])
		}
		out, err := exec.Command(rpm, "--eval", fmt.Sprintf("%%{lua: print(rpm.vercmp(%q, %q))}", a, b)).Output()
		if err != nil || strings.TrimSpace(string(out)) != "-1" {
			t.Errorf("rpm orders %s (%s) before %s (%s): vercmp says %q, %v", a, describes[i], b, describes[i+1], out, err)
		}
	}
}

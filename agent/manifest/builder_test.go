package manifest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
)

// summary renders accepted objects as "name(file) target...", the parts a
// user looks at in `volumed status`.
func summary(root string, objs []*Object) []string {
	out := []string{}
	for _, o := range objs {
		s := fmt.Sprintf("%s(%s)", o.Metadata.Name, strings.TrimPrefix(o.File, root+"/"))
		if o.Volume != nil {
			for _, m := range o.Volume.Mounts {
				s += " " + m.Path
			}
		}
		if o.Mount != nil {
			s += " " + o.Mount.Volume + ":" + o.Mount.Path
		}
		out = append(out, s)
	}
	return out
}

type want struct {
	volumes, mounts, problems, bad []string
}

func check(t *testing.T, root string, res *Result, w want) {
	t.Helper()
	norm := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	if got := summary(root, res.Volumes); !slices.Equal(got, norm(w.volumes)) {
		t.Errorf("volumes:\n got %q\nwant %q", got, norm(w.volumes))
	}
	if got := summary(root, res.Mounts); !slices.Equal(got, norm(w.mounts)) {
		t.Errorf("mounts:\n got %q\nwant %q", got, norm(w.mounts))
	}
	if got := rel(root, res.Problems); !slices.Equal(got, norm(w.problems)) {
		t.Errorf("problems:\n got %q\nwant %q", got, norm(w.problems))
	}
	if got := relPaths(root, res.BadFiles); !slices.Equal(got, norm(w.bad)) {
		t.Errorf("bad files:\n got %q\nwant %q", got, norm(w.bad))
	}
}

func loopVolume(name, file string, mounts ...string) string {
	return strings.Replace(tmpfsVolume(name, mounts...), "{tmpfs: {size: 1Mi}}", "{loop: {file: "+file+"}}", 1) + ext4
}

func mountObj(name, volume, path string) string {
	return "apiVersion: volumed/v1\nkind: Mount\nmetadata:\n  name: " + name + "\nspec:\n  volume: " + volume + "\n  path: " + path + "\n"
}

// withSource makes a volume of source; a block source gets a filesystem
// on the last line.
func withSource(name, source string) string {
	v := strings.Replace(tmpfsVolume(name), "{tmpfs: {size: 1Mi}}", source, 1)
	if strings.HasPrefix(source, "{directory:") || strings.HasPrefix(source, "{tmpfs:") {
		return v
	}
	return v + ext4
}

func TestBuilderPrecedence(t *testing.T) {
	root := t.TempDir()
	usr := mkdir(t, root, "usr")
	etc := mkdir(t, root, "etc")
	run := filepath.Join(root, "run") // created later, like /run at boot
	b := NewBuilder([]string{usr, etc, run}, Options{StateDir: "/var/lib/volumed", CheckOwnership: true, Kinds: testKinds})

	write(t, usr, "data.yaml", tmpfsVolume("data", "/srv/shipped"))
	write(t, usr, "logs.yaml", tmpfsVolume("logs", "/srv/logs"))
	check(t, root, b.Load(), want{volumes: []string{"data(usr/data.yaml) /srv/shipped", "logs(usr/logs.yaml) /srv/logs"}})

	write(t, etc, "data.yaml", tmpfsVolume("data", "/srv/operator"))
	check(t, root, b.Load(), want{volumes: []string{"data(etc/data.yaml) /srv/operator", "logs(usr/logs.yaml) /srv/logs"}})

	mkdir(t, run)
	write(t, run, "data.yaml", tmpfsVolume("data", "/srv/runtime"))
	symlink(t, "/dev/null", filepath.Join(run, "logs.yaml"))
	check(t, root, b.Load(), want{volumes: []string{"data(run/data.yaml) /srv/runtime"}})

	if err := os.RemoveAll(run); err != nil {
		t.Fatal(err)
	}
	check(t, root, b.Load(), want{volumes: []string{"data(etc/data.yaml) /srv/operator", "logs(usr/logs.yaml) /srv/logs"}})
}

func TestBuilderLastGood(t *testing.T) {
	root := t.TempDir()
	usr := mkdir(t, root, "usr")
	etc := mkdir(t, root, "etc")
	b := NewBuilder([]string{usr, etc}, Options{CheckOwnership: true, Kinds: testKinds})

	good := tmpfsVolume("data", "/srv/data") + "---\n" + mountObj("logs", "data", "/srv/logs")
	file := write(t, etc, "data.yaml", good)
	first := b.Load()
	check(t, root, first, want{volumes: []string{"data(etc/data.yaml) /srv/data"}, mounts: []string{"logs(etc/data.yaml) data:/srv/logs"}})
	// kept: the file is refused with problem, its last good objects stay.
	kept := func(problem string) want {
		return want{
			volumes:  []string{"data(etc/data.yaml) /srv/data"},
			mounts:   []string{"logs(etc/data.yaml) data:/srv/logs"},
			problems: []string{problem},
			bad:      []string{"etc/data.yaml"},
		}
	}

	// A broken edit: the file is refused and its volumes stay as they were.
	write(t, etc, "data.yaml", strings.Replace(good, "/srv/data", "/srv/new", 1)+"  mountz: []\n")
	check(t, root, b.Load(), kept(`etc/data.yaml:17:3: spec.mountz: unknown field`))

	// Still broken on the next pass: still the last good objects.
	second := b.Load()
	if len(second.Volumes) != 1 || second.Volumes[0] != first.Volumes[0] {
		t.Errorf("the last good object was not kept")
	}

	// Made writable by others: refused as well, nothing torn down.
	chmod(t, file, 0o646)
	check(t, root, b.Load(), kept(`etc/data.yaml: refused: mode 0646 lets group or others write it`))

	// The directory made writable by others: every file in it is refused
	// (reported once), and nothing is torn down.
	chmod(t, file, 0o644)
	chmod(t, etc, 0o777)
	check(t, root, b.Load(), kept(`etc: refused: mode 0777 lets group or others write it`))
	chmod(t, etc, 0o755)

	// The directory becomes unreadable as a directory: the files it
	// declared are not gone, only unknown.
	moved := filepath.Join(root, "etc.moved")
	if err := os.Rename(etc, moved); err != nil {
		t.Fatal(err)
	}
	write(t, root, "etc", "")
	check(t, root, b.Load(), kept(`etc: cannot read: not a directory`))
	if err := os.Remove(etc); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(moved, etc); err != nil {
		t.Fatal(err)
	}

	// Fixed: the new version is taken.
	write(t, etc, "data.yaml", strings.Replace(good, "/srv/data", "/srv/new", 1))
	check(t, root, b.Load(), want{volumes: []string{"data(etc/data.yaml) /srv/new"}, mounts: []string{"logs(etc/data.yaml) data:/srv/logs"}})

	// Broken again, then removed: removal is a decision, the objects go.
	write(t, etc, "data.yaml", "{")
	check(t, root, b.Load(), want{
		volumes:  []string{"data(etc/data.yaml) /srv/new"},
		mounts:   []string{"logs(etc/data.yaml) data:/srv/logs"},
		problems: []string{`etc/data.yaml:2:1: invalid YAML: did not find expected node content`},
		bad:      []string{"etc/data.yaml"},
	})
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	check(t, root, b.Load(), want{})

	// Coming back broken, it has no last good version to fall back to.
	write(t, etc, "data.yaml", "{")
	check(t, root, b.Load(), want{
		problems: []string{`etc/data.yaml:2:1: invalid YAML: did not find expected node content`},
		bad:      []string{"etc/data.yaml"},
	})
}

func TestBuilderLastGoodAcrossOverride(t *testing.T) {
	root := t.TempDir()
	usr := mkdir(t, root, "usr")
	etc := mkdir(t, root, "etc")
	b := NewBuilder([]string{usr, etc}, Options{Kinds: testKinds})
	write(t, usr, "data.yaml", tmpfsVolume("data", "/srv/shipped"))
	b.Load()
	// The operator's override is broken: the name keeps what it declared last.
	write(t, etc, "data.yaml", tmpfsVolume("data", "srv/operator"))
	check(t, root, b.Load(), want{
		volumes:  []string{"data(usr/data.yaml) /srv/shipped"},
		problems: []string{`etc/data.yaml:8:13: spec.mounts[0].path: must be an absolute path, got "srv/operator"`},
		bad:      []string{"etc/data.yaml"},
	})
}

func TestSecretFiles(t *testing.T) {
	root := t.TempDir()
	dir := mkdir(t, root, "d")
	loose := filepath.Join(root, "loose")
	if err := os.WriteFile(loose, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	tight := filepath.Join(root, "tight")
	if err := os.WriteFile(tight, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := func(file string) string {
		return `{iscsi: {portal: "192.0.2.1:3260", iqn: "iqn.2026-01.x:t", lun: 1, chap: {username: u, passwordFile: ` + file + `}}}`
	}
	write(t, dir, "a.yaml", withSource("good", src(tight)))
	write(t, dir, "b.yaml", withSource("later", strings.Replace(src(filepath.Join(root, "not-yet")), "lun: 1", "lun: 3", 1)))
	write(t, dir, "c.yaml", withSource("bad", strings.Replace(src(loose), "lun: 1", "lun: 2", 1)))
	res := NewBuilder([]string{dir}, Options{StateDir: "/var/lib/volumed", CheckOwnership: true, Kinds: testKinds}).Load()
	check(t, root, res, want{
		volumes:  []string{"good(d/a.yaml)", "later(d/b.yaml)"},
		problems: []string{`d/c.yaml:6:112: spec.source.iscsi.chap.passwordFile: mode 0644 lets group or others read it, must be 0600 or stricter: insecure secret file`},
		bad:      []string{"d/c.yaml"},
	})
	for _, p := range res.Problems {
		if strings.Contains(p.Error(), "s3cret") {
			t.Fatal("a problem shows the secret")
		}
	}
}

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

func TestBuilderConflicts(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  want
	}{
		{
			name: "duplicate names across files",
			files: map[string]string{
				"a.yaml": tmpfsVolume("data", "/srv/a"),
				"b.yaml": "# the same name again\n" + tmpfsVolume("data", "/srv/b"),
				"c.yaml": mountObj("data", "data", "/srv/c"), // a Mount may share a Volume's name
			},
			want: want{
				volumes:  []string{"data(d/a.yaml) /srv/a"},
				mounts:   []string{"data(d/c.yaml) data:/srv/c"},
				problems: []string{`d/b.yaml:5:9: metadata.name: Volume "data" is already declared in d/a.yaml:1`},
			},
		},
		{
			name: "two volumes on one image",
			files: map[string]string{
				"a.yaml": loopVolume("one", "/img/x.img", "/srv/one"),
				"b.yaml": loopVolume("two", "/img/x.img", "/srv/two") + "---\n" + loopVolume("three", "/img/y.img"),
			},
			want: want{
				volumes:  []string{"one(d/a.yaml) /srv/one", "three(d/b.yaml)"},
				problems: []string{`d/b.yaml:6:25: spec.source.loop.file: loop file /img/x.img is already used by Volume "one" (d/a.yaml:1)`},
			},
		},
		{
			name: "two volumes on one source of each kind",
			files: map[string]string{
				"a.yaml": strings.Join([]string{
					withSource("i1", `{iscsi: {portal: "192.0.2.1:3260", iqn: "iqn.2026-01.x:t", lun: 1}}`),
					withSource("n1", `{nvme: {transport: tcp, address: 192.0.2.2, nqn: "nqn.2026-01.x:t", namespace: 2}}`),
					withSource("d1", `{device: {wwn: "0x5000c500a1b2c3d4"}}`),
					withSource("d2", `{device: {path: /dev/disk/by-id/ata-X}}`),
					withSource("s1", `{directory: {path: /srv/shared}}`),
				}, "---\n"),
				"b.yaml": strings.Join([]string{
					withSource("i2", `{iscsi: {portal: "192.0.2.1:3260", iqn: "iqn.2026-01.x:t", lun: 1}}`),
					withSource("i3", `{iscsi: {portal: "192.0.2.1:3260", iqn: "iqn.2026-01.x:t", lun: 2}}`),
					withSource("n2", `{nvme: {transport: rdma, address: 192.0.2.3, nqn: "nqn.2026-01.x:t", namespace: 2}}`),
					withSource("d3", `{device: {wwn: "0x5000c500a1b2c3d4"}}`),
					withSource("d4", `{device: {path: /dev/disk/by-id/ata-X}}`),
					withSource("s2", `{directory: {path: /srv/shared}}`),
				}, "---\n"),
			},
			want: want{
				volumes: []string{"i1(d/a.yaml)", "n1(d/a.yaml)", "d1(d/a.yaml)", "d2(d/a.yaml)", "s1(d/a.yaml)", "i3(d/b.yaml)"},
				problems: []string{
					`d/b.yaml:6:12: spec.source.iscsi: iSCSI LUN 1 of iqn.2026-01.x:t at 192.0.2.1:3260 is already used by Volume "i1" (d/a.yaml:1)`,
					`d/b.yaml:22:12: spec.source.nvme: NVMe namespace 2 of nqn.2026-01.x:t is already used by Volume "n1" (d/a.yaml:9)`,
					`d/b.yaml:30:26: spec.source.device.wwn: device with WWN 0x5000c500a1b2c3d4 is already used by Volume "d1" (d/a.yaml:17)`,
					`d/b.yaml:38:27: spec.source.device.path: device /dev/disk/by-id/ata-X is already used by Volume "d2" (d/a.yaml:25)`,
					`d/b.yaml:46:30: spec.source.directory.path: directory /srv/shared is already used by Volume "s1" (d/a.yaml:33)`,
				},
			},
		},
		{
			name: "two targets on one path",
			files: map[string]string{
				"a.yaml": tmpfsVolume("a", "/srv/x", "/srv/a"),
				"b.yaml": tmpfsVolume("b", "/srv/b", "/srv/x"),
				"c.yaml": mountObj("c", "a", "/srv/a"),
				"d.yaml": mountObj("d", "a", "/srv/d") + "---\n" + mountObj("e", "a", "/srv/d"),
			},
			want: want{
				volumes: []string{"a(d/a.yaml) /srv/x /srv/a"},
				mounts:  []string{"d(d/d.yaml) a:/srv/d"},
				problems: []string{
					`d/b.yaml:9:13: spec.mounts[1].path: target /srv/x is already used by Volume "a" (d/a.yaml:1)`,
					`d/c.yaml:7:9: spec.path: target /srv/a is already used by Volume "a" (d/a.yaml:1)`,
					`d/d.yaml:15:9: spec.path: target /srv/d is already used by Mount "d" (d/d.yaml:1)`,
				},
			},
		},
		{
			name: "nested targets must be declared",
			files: map[string]string{
				"a.yaml": tmpfsVolume("outer", "/srv/data"),
				"b.yaml": mountObj("logs", "inner", "/srv/data/logs") + "  nestedIn: outer\n",
				"c.yaml": mountObj("cache", "inner", "/srv/data/cache"),
				"d.yaml": tmpfsVolume("inner", "/srv/inner"),
			},
			want: want{
				volumes: []string{"outer(d/a.yaml) /srv/data", "inner(d/d.yaml) /srv/inner"},
				mounts:  []string{"logs(d/b.yaml) inner:/srv/data/logs"},
				problems: []string{
					`d/c.yaml:7:9: spec.path: is inside target /srv/data of Volume "outer" (d/a.yaml:1); set nestedIn: outer on it to publish it on top of that one`,
				},
			},
		},
		{
			name: "mount waits for its volume",
			files: map[string]string{
				"a.yaml": mountObj("logs", "data", "/srv/logs"),
				// A refused volume is not declared either.
				"b.yaml": tmpfsVolume("data", "/srv/b") + "---\n" + tmpfsVolume("data2", "/srv/b"),
				"c.yaml": mountObj("more", "data2", "/srv/more"),
			},
			want: want{
				volumes: []string{"data(d/b.yaml) /srv/b"},
				mounts:  []string{"logs(d/a.yaml) data:/srv/logs", "more(d/c.yaml) data2:/srv/more"},
				problems: []string{
					`d/b.yaml:17:13: spec.mounts[0].path: target /srv/b is already used by Volume "data" (d/b.yaml:1)`,
					`d/c.yaml:6:11: spec.volume: waiting: volume "data2" is not declared`,
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := mkdir(t, root, "d")
			for name, content := range tt.files {
				write(t, dir, name, content)
			}
			res := NewBuilder([]string{dir}, testOpts).Load()
			check(t, root, res, tt.want)
			for _, p := range res.Problems {
				if isWaiting := strings.Contains(p.Reason, "waiting:"); p.Warning != isWaiting {
					t.Errorf("%s: Warning %v", p.Error(), p.Warning)
				}
			}
			// validate sees the same problems in the same files.
			if got, want := rel(root, Validate([]string{dir}, testOpts)), tt.want.problems; !slices.Equal(got, want) {
				t.Errorf("Validate:\n got %q\nwant %q", got, want)
			}
		})
	}
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

	// A broken edit: the file is refused and its volumes stay as they were.
	write(t, etc, "data.yaml", strings.Replace(good, "/srv/data", "/srv/new", 1)+"  mountz: []\n")
	check(t, root, b.Load(), want{
		volumes:  []string{"data(etc/data.yaml) /srv/data"},
		mounts:   []string{"logs(etc/data.yaml) data:/srv/logs"},
		problems: []string{`etc/data.yaml:17:3: spec.mountz: unknown field`},
		bad:      []string{"etc/data.yaml"},
	})

	// Still broken on the next pass: still the last good objects.
	second := b.Load()
	if len(second.Volumes) != 1 || second.Volumes[0] != first.Volumes[0] {
		t.Errorf("the last good object was not kept")
	}

	// Made writable by others: refused as well, nothing torn down.
	chmod(t, file, 0o646)
	check(t, root, b.Load(), want{
		volumes:  []string{"data(etc/data.yaml) /srv/data"},
		mounts:   []string{"logs(etc/data.yaml) data:/srv/logs"},
		problems: []string{`etc/data.yaml: refused: mode 0646 lets group or others write it`},
		bad:      []string{"etc/data.yaml"},
	})

	// The directory made writable by others: every file in it is refused
	// (reported once), and nothing is torn down.
	chmod(t, file, 0o644)
	chmod(t, etc, 0o777)
	check(t, root, b.Load(), want{
		volumes:  []string{"data(etc/data.yaml) /srv/data"},
		mounts:   []string{"logs(etc/data.yaml) data:/srv/logs"},
		problems: []string{`etc: refused: mode 0777 lets group or others write it`},
		bad:      []string{"etc/data.yaml"},
	})
	chmod(t, etc, 0o755)

	// The directory becomes unreadable as a directory: the files it
	// declared are not gone, only unknown.
	moved := filepath.Join(root, "etc.moved")
	if err := os.Rename(etc, moved); err != nil {
		t.Fatal(err)
	}
	write(t, root, "etc", "")
	check(t, root, b.Load(), want{
		volumes:  []string{"data(etc/data.yaml) /srv/data"},
		mounts:   []string{"logs(etc/data.yaml) data:/srv/logs"},
		problems: []string{`etc: cannot read: not a directory`},
		bad:      []string{"etc/data.yaml"},
	})
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

func TestBuilderIncumbentKeepsClaims(t *testing.T) {
	root := t.TempDir()
	dir := mkdir(t, root, "d")
	b := NewBuilder([]string{dir}, testOpts)

	write(t, dir, "b.yaml", tmpfsVolume("b", "/srv/x", "/srv/y"))
	check(t, root, b.Load(), want{volumes: []string{"b(d/b.yaml) /srv/x /srv/y"}})

	// a.yaml sorts first, but b holds /srv/x and stays mounted.
	write(t, dir, "a.yaml", tmpfsVolume("a", "/srv/x"))
	check(t, root, b.Load(), want{
		volumes:  []string{"b(d/b.yaml) /srv/x /srv/y"},
		problems: []string{`d/a.yaml:8:13: spec.mounts[0].path: target /srv/x is already used by Volume "b" (d/b.yaml:1)`},
	})

	// A fresh agent (no incumbents) decides by file order instead.
	check(t, root, NewBuilder([]string{dir}, testOpts).Load(), want{
		volumes:  []string{"a(d/a.yaml) /srv/x"},
		problems: []string{`d/b.yaml:8:13: spec.mounts[0].path: target /srv/x is already used by Volume "a" (d/a.yaml:1)`},
	})

	// b's edit collides with c, the incumbent of /srv/z: b's new version is
	// refused and its previous version stays.
	write(t, dir, "c.yaml", tmpfsVolume("c", "/srv/z"))
	check(t, root, b.Load(), want{
		volumes: []string{"b(d/b.yaml) /srv/x /srv/y", "c(d/c.yaml) /srv/z"},
		problems: []string{
			`d/a.yaml:8:13: spec.mounts[0].path: target /srv/x is already used by Volume "b" (d/b.yaml:1)`,
		},
	})
	write(t, dir, "b.yaml", tmpfsVolume("b", "/srv/x", "/srv/y", "/srv/z"))
	check(t, root, b.Load(), want{
		volumes: []string{"b(d/b.yaml) /srv/x /srv/y", "c(d/c.yaml) /srv/z"},
		problems: []string{
			`d/a.yaml:8:13: spec.mounts[0].path: target /srv/x is already used by Volume "b" (d/b.yaml:1)`,
			`d/b.yaml:10:13: spec.mounts[2].path: target /srv/z is already used by Volume "c" (d/c.yaml:1); its previous version stays in effect`,
		},
	})

	// b lets /srv/x go in the same edit that a wants it: a gets it at once.
	write(t, dir, "b.yaml", tmpfsVolume("b", "/srv/y"))
	check(t, root, b.Load(), want{volumes: []string{"a(d/a.yaml) /srv/x", "b(d/b.yaml) /srv/y", "c(d/c.yaml) /srv/z"}})
}

func TestValidatePaths(t *testing.T) {
	root := t.TempDir()
	dir := mkdir(t, root, "d")
	write(t, dir, "a.yaml", loopVolume("a", "/img/a.img", "/srv/a"))
	write(t, dir, "notes.txt", "not a manifest")
	symlink(t, "/dev/null", filepath.Join(dir, "masked.yaml"))
	other := write(t, root, "other.conf", loopVolume("b", "/img/a.img"))
	json := write(t, root, "c.json", `{"apiVersion": "volumed/v1", "kind": "Mount", "metadata": {"name": "c"}, "spec": {"volume": "x", "path": "/srv/a"}}`)

	got := rel(root, Validate([]string{dir, other, json, filepath.Join(root, "nope")}, testOpts))
	want := []string{
		"nope: cannot read: no such file or directory",
		`other.conf:6:25: spec.source.loop.file: loop file /img/a.img is already used by Volume "a" (d/a.yaml:1)`,
		`c.json:1:106: spec.path: target /srv/a is already used by Volume "a" (d/a.yaml:1)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("Validate:\n got %q\nwant %q", got, want)
	}
	if probs := Validate([]string{filepath.Join(dir, "a.yaml")}, testOpts); len(probs) != 0 {
		t.Errorf("a good file: %q", rel(root, probs))
	}
}

// A volume published at /srv/data/x keeps working when a newcomer wants
// /srv/data: the newcomer would cover it, so the newcomer is refused.
func TestNestingNewcomerRefused(t *testing.T) {
	root := t.TempDir()
	dir := mkdir(t, root, "d")
	write(t, dir, "b.yaml", tmpfsVolume("inner", "/srv/data/x"))
	b := NewBuilder([]string{dir}, testOpts)
	check(t, root, b.Load(), want{volumes: []string{"inner(d/b.yaml) /srv/data/x"}})
	write(t, dir, "a.yaml", tmpfsVolume("outer", "/srv/data"))
	check(t, root, b.Load(), want{
		volumes:  []string{"inner(d/b.yaml) /srv/data/x"},
		problems: []string{`d/a.yaml:8:13: spec.mounts[0].path: would cover target /srv/data/x of Volume "inner" (d/b.yaml:1), which does not declare nestedIn: outer`},
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

package manifest_test

import (
	"slices"
	"strings"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
)

// conflictCase is a directory of manifest files and what one Load of it
// accepts and refuses.
type conflictCase struct {
	name  string
	files map[string]string
	want  want
}

func conflictCases(t *testing.T, tests []conflictCase) {
	t.Helper()
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

// Names and sources: at most one object each.
func TestBuilderConflicts(t *testing.T) {
	conflictCases(t, []conflictCase{
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
	})
}

// Publish targets: at most one object each, nesting declared, and a
// Mount waits for its volume.
func TestBuilderTargetConflicts(t *testing.T) {
	conflictCases(t, []conflictCase{
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

package manifest_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/device"
	"github.com/volumed/volumed/kinds/directory"
	"github.com/volumed/volumed/kinds/iscsi"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/kinds/loop"
	"github.com/volumed/volumed/kinds/nvme"
	"github.com/volumed/volumed/kinds/tmpfs"
)

// vol starts a Volume named data; spec's members begin on line 6, column 3.
const vol = "apiVersion: volumed/v1\nkind: Volume\nmetadata:\n  name: data\nspec:\n"

// mnt starts a Mount named app; spec's members begin on line 6, column 3.
// ext4 ends a Volume whose block source is not what a case is about.
const ext4 = "  filesystem: {type: ext4}\n"

const mnt = "apiVersion: volumed/v1\nkind: Mount\nmetadata:\n  name: app\nspec:\n"

var (
	// The kinds the messages below list: these tests hold the loader,
	// not the registry, so a kind added to kinds.All leaves them be.
	testKinds = kinds.Manifest([]kind.Kind{loop.Kind{}, iscsi.Kind{}, nvme.Kind{}, device.Kind{}, directory.Kind{}, tmpfs.Kind{}})
	testOpts  = Options{StateDir: "/var/lib/volumed", Kinds: testKinds}
)

func render(probs []Problem) []string {
	out := []string{}
	for _, p := range probs {
		out = append(out, p.Error())
	}
	return out
}

func TestParseBytesProblems(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"unknown top-level field", vol + "  source: {tmpfs: {size: 1Mi}}\nstatus: {}\n", []string{
			`x.yaml:7:1: status: unknown field`,
		}},
		{"misspelled field", vol + "  source:\n    loop:\n      fiel: /x.img\n" + ext4, []string{
			`x.yaml:7:5: spec.source.loop.file: required`,
			`x.yaml:8:7: spec.source.loop.fiel: unknown field (did you mean "file"?)`,
		}},
		{"misspelled case", vol + "  source:\n    loop: {file: /x.img, readonly: true}\n" + ext4, []string{
			`x.yaml:7:26: spec.source.loop.readonly: unknown field (did you mean "readOnly"?)`,
		}},
		{"misspelled plural", vol + "  source: {tmpfs: {size: 1Mi}}\n  mount: [{path: /srv/a}]\n", []string{
			`x.yaml:7:3: spec.mount: unknown field (did you mean "mounts"?)`,
		}},
		{"wrong type integer", vol + "  source:\n    iscsi: {portal: \"192.0.2.1:3260\", iqn: iqn.2026-01.x:y, lun: abc}\n" + ext4, []string{
			`x.yaml:7:66: spec.source.iscsi.lun: expected an integer, got "abc"`,
		}},
		{"wrong type quoted integer", vol + "  source:\n    nvme: {transport: tcp, address: a, nqn: nqn.x, namespace: \"1\"}\n" + ext4, []string{
			`x.yaml:7:63: spec.source.nvme.namespace: expected an integer, got "1"`,
		}},
		{"wrong type mapping", vol + "  source: /x.img\n", []string{
			`x.yaml:6:11: spec.source: expected a mapping, got "/x.img"`,
		}},
		{"wrong type list", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts: /srv/a\n", []string{
			`x.yaml:7:11: spec.mounts: expected a list, got "/srv/a"`,
		}},
		{"wrong type string", vol + "  source:\n    loop: {file: [a, b]}\n" + ext4, []string{
			`x.yaml:7:18: spec.source.loop.file: expected a string, got a list`,
		}},
		{"wrong type bool", mnt + "  volume: data\n  path: /srv/a\n  readOnly: yes\n", []string{
			`x.yaml:8:13: spec.readOnly: expected true or false, got "yes"`,
		}},
		{"bad name", strings.Replace(vol, "name: data", "name: Data_1", 1) + "  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:4:9: metadata.name: must be lowercase letters, digits and '-', starting and ending with a letter or digit, got "Data_1"`,
		}},
		{"name ends with dash", strings.Replace(vol, "name: data", "name: data-", 1) + "  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:4:9: metadata.name: must be lowercase letters, digits and '-', starting and ending with a letter or digit, got "data-"`,
		}},
		{"name too long", strings.Replace(vol, "name: data", "name: "+strings.Repeat("a", 64), 1) + "  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:4:9: metadata.name: must be at most 63 characters, got 64`,
		}},
		{"name of a CSI volume", strings.Replace(vol, "name: data", "name: csi-data", 1) + "  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:4:9: metadata.name: names starting with "csi-" are the volumes of the CSI node service (volumed run --csi-endpoint)`,
		}},
		{"no name", "apiVersion: volumed/v1\nkind: Volume\nspec:\n  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:1:1: metadata.name: required`,
		}},
		{"block source without filesystem", vol + "  source: {loop: {file: /x.img}}\n", []string{
			`x.yaml:5:1: spec.filesystem: required with source.loop, a block device: add one with type ext4, xfs or btrfs, or publish the raw device with mounts: [{path: ..., block: true}]`,
		}},
		{"block source without filesystem, absent", vol + "  state: absent\n  source: {device: {serial: X1}}\n", []string{
			`x.yaml:5:1: spec.filesystem: required with source.device, a block device: add one with type ext4, xfs or btrfs, or publish the raw device with mounts: [{path: ..., block: true}]`,
		}},
		{"raw block mount of a filesystem volume", vol + "  source: {loop: {file: /x.img}}\n" + ext4 + "  mounts: [{path: /srv/a, block: true}]\n", []string{
			`x.yaml:8:34: spec.mounts[0].block: only a block source without a filesystem block is published raw: remove block: true or the filesystem block`,
		}},
		{"filesystem mount of a raw block volume", vol + "  source: {loop: {file: /x.img}}\n  mounts: [{path: /srv/a}]\n", []string{
			`x.yaml:7:12: spec.mounts[0].block: required: source.loop has no filesystem block, so it is published as the raw device (block: true), or add a filesystem block`,
		}},
		{"unknown source kind", vol + "  source:\n    lop: {file: /x.img}\n" + ext4, []string{
			`x.yaml:6:3: spec.source: exactly one of loop, iscsi, nvme, device, directory, tmpfs is required, got none`,
			`x.yaml:7:5: spec.source.lop: unknown field (did you mean "loop"?)`,
		}},
		{"null source member", vol + "  source: {tmpfs: null}\n", []string{
			`x.yaml:6:3: spec.source: exactly one of loop, iscsi, nvme, device, directory, tmpfs is required, got none`,
		}},
		{"two sources", vol + "  source:\n    loop: {file: /x.img}\n    tmpfs: {size: 1Mi}\n" + ext4, []string{
			`x.yaml:6:3: spec.source: exactly one of loop, iscsi, nvme, device, directory, tmpfs is allowed, got loop and tmpfs`,
		}},
		{"no source", vol + "  mounts: [{path: /srv/a}]\n", []string{
			`x.yaml:5:1: spec.source: exactly one of loop, iscsi, nvme, device, directory, tmpfs is required, got none`,
		}},
		{"empty source", vol + "  source: {}\n", []string{
			`x.yaml:6:3: spec.source: exactly one of loop, iscsi, nvme, device, directory, tmpfs is required, got none`,
		}},
		{"no spec", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: data}\n", []string{
			`x.yaml:1:1: spec: required`,
			`x.yaml:1:1: spec.source: exactly one of loop, iscsi, nvme, device, directory, tmpfs is required, got none`,
		}},
		{"relative loop file", vol + "  source:\n    loop: {file: images/x.img}\n" + ext4, []string{
			`x.yaml:7:18: spec.source.loop.file: must be an absolute path, got "images/x.img"`,
		}},
		{"unclean loop file", vol + "  source:\n    loop: {file: /var//images/../x.img}\n" + ext4, []string{
			`x.yaml:7:18: spec.source.loop.file: must be a clean path (did you mean "/var/x.img"?)`,
		}},
		{"loop file under /dev", vol + "  source:\n    loop: {file: /dev/shm/x.img}\n" + ext4, []string{
			`x.yaml:7:18: spec.source.loop.file: must not be /dev or under it`,
		}},
		{"loop create size zero", vol + "  source:\n    loop: {file: /x.img, create: {size: 0}}\n" + ext4, []string{
			`x.yaml:7:41: spec.source.loop.create.size: must be more than 0, got "0"`,
		}},
		{"loop create size bad unit", vol + "  source:\n    loop: {file: /x.img, create: {size: 10GB}}\n" + ext4, []string{
			`x.yaml:7:41: spec.source.loop.create.size: invalid size "10GB": want a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, k, M, G, T or P`,
		}},
		{"loop create without size", vol + "  source:\n    loop: {file: /x.img, create: {}}\n" + ext4, []string{
			`x.yaml:7:26: spec.source.loop.create.size: required`,
		}},
		{"target /", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: /\n", []string{
			`x.yaml:8:13: spec.mounts[0].path: must not be /`,
		}},
		{"target under /proc", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: /proc/x\n", []string{
			`x.yaml:8:13: spec.mounts[0].path: must not be /proc or under it`,
		}},
		{"target /sys", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: /sys\n", []string{
			`x.yaml:8:13: spec.mounts[0].path: must not be /sys or under it`,
		}},
		{"target under /run/volumed", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: /run/volumed/x\n", []string{
			`x.yaml:8:13: spec.mounts[0].path: must not be /run/volumed or under it`,
		}},
		{"target hides /run/volumed", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: /run\n", []string{
			`x.yaml:8:13: spec.mounts[0].path: must not contain /run/volumed (it would hide it)`,
		}},
		{"target state dir", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: /var/lib/volumed\n    - path: /var/lib/volumed/staging/data\n", []string{
			`x.yaml:8:13: spec.mounts[0].path: must not be the state dir /var/lib/volumed or under it`,
			`x.yaml:9:13: spec.mounts[1].path: must not be the state dir /var/lib/volumed or under it`,
		}},
		{"target hides state dir", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: /var\n", []string{
			`x.yaml:8:13: spec.mounts[0].path: must not contain the state dir /var/lib/volumed (it would hide it)`,
		}},
		{"target relative and unclean", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: srv/a\n    - path: /srv/a/\n    - {}\n", []string{
			`x.yaml:8:13: spec.mounts[0].path: must be an absolute path, got "srv/a"`,
			`x.yaml:9:13: spec.mounts[1].path: must be a clean path (did you mean "/srv/a"?)`,
			`x.yaml:10:7: spec.mounts[2].path: required`,
		}},
		{"two mounts on one path", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts:\n    - path: /srv/a\n    - path: /srv/a\n      readOnly: true\n", []string{
			`x.yaml:9:13: spec.mounts[1].path: duplicate of spec.mounts[0].path`,
		}},
		{"filesystem on tmpfs", vol + "  source: {tmpfs: {size: 1Mi}}\n  filesystem: {type: ext4}\n", []string{
			`x.yaml:7:3: spec.filesystem: not allowed with a tmpfs source`,
		}},
		{"filesystem on directory", vol + "  source: {directory: {path: /srv/shared}}\n  filesystem: {type: ext4}\n", []string{
			`x.yaml:7:3: spec.filesystem: not allowed with a directory source`,
		}},
		{"filesystem type and format", vol + "  source: {loop: {file: /x.img}}\n  filesystem: {type: ntfs, format: always}\n", []string{
			`x.yaml:7:22: spec.filesystem.type: must be ext4, xfs or btrfs, got "ntfs"`,
			`x.yaml:7:36: spec.filesystem.format: must be ifBlank or never, got "always"`,
		}},
		{"filesystem without type", vol + "  source: {loop: {file: /x.img}}\n  filesystem: {grow: true}\n", []string{
			`x.yaml:7:3: spec.filesystem.type: required (ext4, xfs or btrfs)`,
		}},
		{"bad state", vol + "  state: gone\n  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:6:10: spec.state: must be present or absent, got "gone"`,
		}},
		{"iscsi", vol + "  source:\n    iscsi: {portal: 192.0.2.1, iqn: target1, lun: -1, chap: {username: u, passwordFile: chap}}\n" + ext4, []string{
			`x.yaml:7:21: spec.source.iscsi.portal: must be host:port, got "192.0.2.1"`,
			`x.yaml:7:37: spec.source.iscsi.iqn: must start with "iqn.", "eui." or "naa.", got "target1"`,
			`x.yaml:7:51: spec.source.iscsi.lun: must be 0 or more, got -1`,
			`x.yaml:7:89: spec.source.iscsi.chap.passwordFile: must be an absolute path, got "chap"`,
		}},
		{"iscsi chap incomplete and bad port", vol + "  source:\n    iscsi: {portal: \"h:0\", iqn: eui.02004567A425678D, chap: {}}\n" + ext4, []string{
			`x.yaml:7:21: spec.source.iscsi.portal: port must be 1 to 65535, got "0"`,
			`x.yaml:7:55: spec.source.iscsi.chap.username: required`,
			`x.yaml:7:55: spec.source.iscsi.chap.passwordFile: required`,
		}},
		{"nvme", vol + "  source:\n    nvme: {transport: fc, port: 70000, nqn: data}\n" + ext4, []string{
			`x.yaml:7:5: spec.source.nvme.address: required`,
			`x.yaml:7:5: spec.source.nvme.namespace: must be 1 or more, got 0`,
			`x.yaml:7:23: spec.source.nvme.transport: must be tcp or rdma, got "fc"`,
			`x.yaml:7:33: spec.source.nvme.port: must be 1 to 65535, got 70000`,
			`x.yaml:7:45: spec.source.nvme.nqn: must start with "nqn.", got "data"`,
		}},
		{"device two identities", vol + "  source:\n    device: {path: /dev/sdb, serial: S123}\n" + ext4, []string{
			`x.yaml:7:5: spec.source.device: exactly one of path, serial, wwn is required, got path and serial`,
		}},
		{"device none", vol + "  source:\n    device: {}\n" + ext4, []string{
			`x.yaml:7:5: spec.source.device: exactly one of path, serial, wwn is required, got none`,
		}},
		{"device outside /dev", vol + "  source:\n    device: {path: /srv/disk}\n" + ext4, []string{
			`x.yaml:7:20: spec.source.device.path: must be under /dev`,
		}},
		{"directory", vol + "  source:\n    directory: {path: /srv/../srv/x, create: {mode: \"0999\", uid: -1}}\n", []string{
			`x.yaml:7:23: spec.source.directory.path: must be a clean path (did you mean "/srv/x"?)`,
			`x.yaml:7:53: spec.source.directory.create.mode: must be an octal mode like "0750", got "0999"`,
			`x.yaml:7:66: spec.source.directory.create.uid: must be 0 or more, got -1`,
		}},
		{"tmpfs without size", vol + "  source:\n    tmpfs: {}\n", []string{
			`x.yaml:7:5: spec.source.tmpfs.size: required`,
		}},
		{"mount", mnt + "  volume: Data\n  path: /dev/x\n  subPath: ../logs\n", []string{
			`x.yaml:6:11: spec.volume: must be lowercase letters, digits and '-', starting and ending with a letter or digit, got "Data"`,
			`x.yaml:7:9: spec.path: must not be /dev or under it`,
			`x.yaml:8:12: spec.subPath: must not contain "..", got "../logs"`,
		}},
		{"mount without volume and path", mnt + "  readOnly: true\n", []string{
			`x.yaml:5:1: spec.volume: required`,
			`x.yaml:5:1: spec.path: required`,
		}},
		{"wrong apiVersion", strings.Replace(vol, "volumed/v1", "volumed/v2", 1) + "  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:1:13: apiVersion: must be "volumed/v1", got "volumed/v2"`,
		}},
		{"wrong kind", strings.Replace(vol, "Volume", "Disk", 1) + "  anything: goes\n", []string{
			`x.yaml:2:7: kind: must be Volume or Mount, got "Disk"`,
		}},
		{"document not a mapping", "- a\n- b\n", []string{
			`x.yaml:1:1: a document must be a mapping, got a list`,
		}},
		{"duplicate key", vol + "  source: {tmpfs: {size: 1Mi}}\n  source: {tmpfs: {size: 2Mi}}\n", []string{
			`x.yaml:7:3: spec.source: duplicate key (first at 6:3)`,
		}},
		{"anchor and alias", vol + "  source: {tmpfs: {size: &s 1Mi}}\n  mounts:\n    - path: /srv/a\n    - *s\n", []string{
			`x.yaml:6:26: spec.source.tmpfs.size: anchors are not allowed (&s)`,
			`x.yaml:9:7: spec.mounts[1]: aliases are not allowed (*s)`,
		}},
		{"merge key", vol + "  source: {tmpfs: {size: 1Mi}}\n  <<: {state: absent}\n", []string{
			`x.yaml:7:3: spec.<<: unknown field`,
		}},
		{"custom tag", vol + "  source: {tmpfs: {size: !secret 1Mi}}\n", []string{
			`x.yaml:6:26: spec.source.tmpfs.size: custom tag !secret is not supported`,
		}},
		{"custom tag on a mapping", vol + "  source: !vault {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:6:11: spec.source: custom tag !vault is not supported`,
		}},
		{"nested too deeply", vol + "  source: {tmpfs: {size: 1Mi}}\n  x: " + strings.Repeat("[", 20) + strings.Repeat("]", 20) + "\n", []string{
			`x.yaml:7:20: spec.x[0][0][0][0][0][0][0][0][0][0][0][0][0][0]: nested too deeply (more than 16 levels)`,
		}},
		{"syntax error", vol + "  source: {tmpfs: {size: 1Mi}\n", []string{
			`x.yaml:6:1: invalid YAML: did not find expected ',' or '}'`,
		}},
		{"tab indentation", vol + "\tsource: {}\n", []string{
			`x.yaml:6:1: invalid YAML: found character that cannot start any token`,
		}},
		{"non-UTF-8", vol + "  source: {tmpfs: {size: 1Mi}}\n  # caf\xe9\n", []string{
			`x.yaml:7:8: not valid UTF-8`,
		}},
		{"duplicate name in one file", vol + "  source: {tmpfs: {size: 1Mi}}\n---\n" + vol + "  source: {tmpfs: {size: 2Mi}}\n", []string{
			`x.yaml:11:9: metadata.name: Volume "data" is already declared in this file at line 1`,
		}},
		{"problems from every document", vol + "  source: {}\n---\n" + mnt + "  volume: data\n  path: x\n", []string{
			`x.yaml:6:3: spec.source: exactly one of loop, iscsi, nvme, device, directory, tmpfs is required, got none`,
			`x.yaml:14:9: spec.path: must be an absolute path, got "x"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantProblems(t, tt.in, tt.want) })
	}
}

// wantProblems: x.yaml holding in is refused as a whole with exactly want.
func wantProblems(t *testing.T, in string, want []string) {
	t.Helper()
	objs, probs := ParseBytes("x.yaml", []byte(in), testOpts)
	if got := render(probs); !slices.Equal(got, want) {
		t.Errorf("problems:\n got %q\nwant %q", got, want)
	}
	if objs != nil {
		t.Errorf("a file with problems returned %d objects", len(objs))
	}
}

func TestParseBytesGood(t *testing.T) {
	in := `# shipped by the image
apiVersion: volumed/v1
kind: Volume
metadata:
  name: data
spec:
  source:
    loop:
      file: /var/lib/images/data.img
      create: { size: 10Gi }
  filesystem:
    type: ext4
    mountOptions: [noatime]
    grow: true
  mounts:
    - path: /srv/data
    - path: /srv/data-ro
      readOnly: true
---
apiVersion: volumed/v1
kind: Volume
metadata: { name: scratch }
spec:
  state: absent
  source: { tmpfs: { size: 64Mi } }
---
apiVersion: volumed/v1
kind: Volume
metadata: { name: san }
spec:
  source:
    nvme: { transport: tcp, address: 192.0.2.11, nqn: "nqn.2026-01.com.example:data", namespace: 1 }
  filesystem: { type: xfs, format: never }
---
apiVersion: volumed/v1
kind: Volume
metadata: { name: shared }
spec:
  source:
    directory: { path: /srv/shared, create: { mode: 0750, uid: 0, gid: 0 } }
---
apiVersion: volumed/v1
kind: Mount
metadata: { name: app-logs }
spec:
  volume: data
  path: /srv/app/logs
  readOnly: false
---
`
	objs, probs := ParseBytes("/etc/volumed/volumes.d/data.yaml", []byte(in), testOpts)
	if len(probs) > 0 {
		t.Fatalf("problems: %q", render(probs))
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Kind+"/"+o.Metadata.Name)
	}
	if want := []string{"Volume/data", "Volume/scratch", "Volume/san", "Volume/shared", "Mount/app-logs"}; !slices.Equal(names, want) {
		t.Fatalf("objects %q, want %q", names, want)
	}
	data := objs[0]
	if data.File != "/etc/volumed/volumes.d/data.yaml" || data.Line != 2 {
		t.Errorf("data from %s:%d, want data.yaml:2", data.File, data.Line)
	}
	if data.Volume.State != "present" {
		t.Errorf("default state %q, want present", data.Volume.State)
	}
	if got := data.Volume.Source.Spec.(*loop.Source).Create.SizeBytes; got != 10<<30 {
		t.Errorf("loop size %d, want %d", got, 10<<30)
	}
	if fs := data.Volume.Filesystem; fs.Format != FormatIfBlank || !fs.Grow || !slices.Equal(fs.MountOptions, []string{"noatime"}) {
		t.Errorf("filesystem %+v, want format ifBlank, grow, [noatime]", *fs)
	}
	if m := data.Volume.Mounts; len(m) != 2 || m[1] != (Target{Path: "/srv/data-ro", ReadOnly: true}) {
		t.Errorf("mounts %+v", m)
	}
	scratch := objs[1]
	if scratch.Line != 20 || scratch.Volume.State != "absent" || scratch.Volume.Source.Spec.(*tmpfs.Source).SizeBytes != 64<<20 {
		t.Errorf("scratch at line %d, state %q, size %d", scratch.Line, scratch.Volume.State, scratch.Volume.Source.Spec.(*tmpfs.Source).SizeBytes)
	}
	san := objs[2].Volume
	if n := san.Source.Spec.(*nvme.Source); n.Port != 4420 || n.Namespace != 1 || san.Filesystem.Format != FormatNever {
		t.Errorf("nvme %+v format %q, want default port 4420", *n, san.Filesystem.Format)
	}
	// An unquoted 0750 is an octal-looking YAML integer; it is kept as written.
	if mode := objs[3].Volume.Source.Spec.(*directory.Source).Create.Mode; mode != "0750" {
		t.Errorf("directory mode %q, want 0750", mode)
	}
	if m := objs[4].Mount; *m != (MountSpec{Volume: "data", Path: "/srv/app/logs"}) || objs[4].Volume != nil {
		t.Errorf("mount %+v", *m)
	}
}

func TestParseBytesEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "# nothing yet\n", "---\n", "---\n...\n---\n", "null\n", "\xef\xbb\xbf"} {
		objs, probs := ParseBytes("x.yaml", []byte(in), testOpts)
		if len(objs) != 0 || len(probs) != 0 {
			t.Errorf("%q: %d objects, problems %q; want neither", in, len(objs), render(probs))
		}
	}
}

func TestParseBytesJSON(t *testing.T) {
	// Tab-indented, as json.MarshalIndent writes it.
	in := "{\n\t\"apiVersion\": \"volumed/v1\",\n\t\"kind\": \"Volume\",\n\t\"metadata\": {\"name\": \"data\"},\n" +
		"\t\"spec\": {\n\t\t\"source\": {\"loop\": {\"file\": \"/x.img\", \"create\": {\"size\": \"1Gi\"}}},\n" +
		"\t\t\"filesystem\": {\"type\": \"ext4\"},\n\t\t\"mounts\": [{\"path\": \"/srv/x\", \"readOnly\": true}]\n\t}\n}\n"
	objs, probs := ParseBytes("x.json", []byte(in), testOpts)
	if len(probs) > 0 || len(objs) != 1 {
		t.Fatalf("%d objects, problems %q", len(objs), render(probs))
	}
	v := objs[0].Volume
	if v.Filesystem.Type != "ext4" || v.Source.Spec.(*loop.Source).Create.SizeBytes != 1<<30 || !v.Mounts[0].ReadOnly {
		t.Errorf("decoded %+v", *v)
	}

	bad := strings.Replace(in, `"readOnly": true`, `"readOnly": "true"`, 1)
	_, probs = ParseBytes("x.json", []byte(bad), testOpts)
	if want := []string{`x.json:8:45: spec.mounts[0].readOnly: expected true or false, got "true"`}; !slices.Equal(render(probs), want) {
		t.Errorf("problems %q, want %q", render(probs), want)
	}
}

func TestParseBytesLimits(t *testing.T) {
	doc := vol + "  source: {tmpfs: {size: 1Mi}}\n"
	big := []byte(doc + "# " + strings.Repeat("x", MaxFileSize) + "\n")
	_, probs := ParseBytes("x.yaml", big, testOpts)
	if want := []string{fmt.Sprintf("x.yaml: too big: %d bytes, the limit is 1 MiB", len(big))}; !slices.Equal(render(probs), want) {
		t.Errorf("too big: %q, want %q", render(probs), want)
	}

	var docs []string
	for i := range MaxDocuments + 1 {
		docs = append(docs, strings.Replace(doc, "name: data", fmt.Sprintf("name: v%03d", i), 1))
	}
	// Each document is 7 lines with its separator; the 101st starts on line 701.
	_, probs = ParseBytes("x.yaml", []byte(strings.Join(docs, "---\n")), testOpts)
	if want := []string{"x.yaml:701:1: too many documents: the limit is 100"}; !slices.Equal(render(probs), want) {
		t.Errorf("too many documents: %q, want %q", render(probs), want)
	}
	objs, probs := ParseBytes("x.yaml", []byte(strings.Join(docs[:MaxDocuments], "---\n")), testOpts)
	if len(probs) > 0 || len(objs) != MaxDocuments {
		t.Errorf("%d documents: %d objects, problems %q", MaxDocuments, len(objs), render(probs))
	}

	// Every mistake in a generated file is not worth a line of its own.
	var keys strings.Builder
	keys.WriteString(doc)
	for i := range 60 {
		fmt.Fprintf(&keys, "k%d: 1\n", i)
	}
	_, probs = ParseBytes("x.yaml", []byte(keys.String()), testOpts)
	if got := render(probs); len(got) != MaxProblems+1 || got[0] != "x.yaml:7:1: k0: unknown field" ||
		got[MaxProblems-1] != "x.yaml:56:1: k49: unknown field" || got[MaxProblems] != "x.yaml: 10 more problems not shown" {
		t.Errorf("problems (%d) %q", len(got), got)
	}
}

func TestProblemError(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{File: "a.yaml", Line: 7, Column: 9, Field: "spec.source", Reason: "bad"}, "a.yaml:7:9: spec.source: bad"},
		{Problem{File: "a.yaml", Line: 7, Reason: "invalid YAML: x"}, "a.yaml:7:1: invalid YAML: x"},
		{Problem{File: "/etc/d", Reason: "refused: mode 0777 lets group or others write it"}, "/etc/d: refused: mode 0777 lets group or others write it"},
	}
	for _, tt := range tests {
		if got := tt.p.Error(); got != tt.want {
			t.Errorf("%+v renders %q, want %q", tt.p, got, tt.want)
		}
	}
}

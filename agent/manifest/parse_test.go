package manifest

import (
	"slices"
	"strings"
	"testing"
)

// vol starts a Volume named data; spec's members begin on line 6, column 3.
const vol = "apiVersion: volumed/v1\nkind: Volume\nmetadata:\n  name: data\nspec:\n"

// mnt starts a Mount named app; spec's members begin on line 6, column 3.
const mnt = "apiVersion: volumed/v1\nkind: Mount\nmetadata:\n  name: app\nspec:\n"

var testOpts = Options{StateDir: "/var/lib/volumed"}

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
		{"misspelled field", vol + "  source:\n    loop:\n      fiel: /x.img\n", []string{
			`x.yaml:7:5: spec.source.loop.file: required`,
			`x.yaml:8:7: spec.source.loop.fiel: unknown field (did you mean "file"?)`,
		}},
		{"misspelled case", vol + "  source:\n    loop: {file: /x.img, readonly: true}\n", []string{
			`x.yaml:7:26: spec.source.loop.readonly: unknown field (did you mean "readOnly"?)`,
		}},
		{"misspelled plural", vol + "  source: {tmpfs: {size: 1Mi}}\n  mount: [{path: /srv/a}]\n", []string{
			`x.yaml:7:3: spec.mount: unknown field (did you mean "mounts"?)`,
		}},
		{"wrong type integer", vol + "  source:\n    iscsi: {portal: \"192.0.2.1:3260\", iqn: iqn.2026-01.x:y, lun: abc}\n", []string{
			`x.yaml:7:66: spec.source.iscsi.lun: expected an integer, got "abc"`,
		}},
		{"wrong type quoted integer", vol + "  source:\n    nvme: {transport: tcp, address: a, nqn: nqn.x, namespace: \"1\"}\n", []string{
			`x.yaml:7:63: spec.source.nvme.namespace: expected an integer, got "1"`,
		}},
		{"wrong type mapping", vol + "  source: /x.img\n", []string{
			`x.yaml:6:11: spec.source: expected a mapping, got "/x.img"`,
		}},
		{"wrong type list", vol + "  source: {tmpfs: {size: 1Mi}}\n  mounts: /srv/a\n", []string{
			`x.yaml:7:11: spec.mounts: expected a list, got "/srv/a"`,
		}},
		{"wrong type string", vol + "  source:\n    loop: {file: [a, b]}\n", []string{
			`x.yaml:7:19: spec.source.loop.file: expected a string, got a list`,
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
		{"no name", "apiVersion: volumed/v1\nkind: Volume\nspec:\n  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:1:1: metadata.name: required`,
		}},
		{"two sources", vol + "  source:\n    loop: {file: /x.img}\n    tmpfs: {size: 1Mi}\n", []string{
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
		{"relative loop file", vol + "  source:\n    loop: {file: images/x.img}\n", []string{
			`x.yaml:7:19: spec.source.loop.file: must be an absolute path, got "images/x.img"`,
		}},
		{"unclean loop file", vol + "  source:\n    loop: {file: /var//images/../x.img}\n", []string{
			`x.yaml:7:19: spec.source.loop.file: must be a clean path (did you mean "/var/x.img"?)`,
		}},
		{"loop file under /dev", vol + "  source:\n    loop: {file: /dev/shm/x.img}\n", []string{
			`x.yaml:7:19: spec.source.loop.file: must not be /dev or under it`,
		}},
		{"loop create size zero", vol + "  source:\n    loop: {file: /x.img, create: {size: 0}}\n", []string{
			`x.yaml:7:43: spec.source.loop.create.size: must be more than 0, got "0"`,
		}},
		{"loop create size bad unit", vol + "  source:\n    loop: {file: /x.img, create: {size: 10GB}}\n", []string{
			`x.yaml:7:43: spec.source.loop.create.size: invalid size "10GB": want a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, k, M, G, T or P`,
		}},
		{"loop create without size", vol + "  source:\n    loop: {file: /x.img, create: {}}\n", []string{
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
			`x.yaml:7:23: spec.filesystem.type: must be ext4, xfs or btrfs, got "ntfs"`,
			`x.yaml:7:37: spec.filesystem.format: must be ifBlank or never, got "always"`,
		}},
		{"filesystem without type", vol + "  source: {loop: {file: /x.img}}\n  filesystem: {grow: true}\n", []string{
			`x.yaml:7:3: spec.filesystem.type: required (ext4, xfs or btrfs)`,
		}},
		{"bad state", vol + "  state: gone\n  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:6:10: spec.state: must be present or absent, got "gone"`,
		}},
		{"iscsi", vol + "  source:\n    iscsi: {portal: 192.0.2.1, iqn: target1, lun: -1, chap: {username: u, passwordFile: chap}}\n", []string{
			`x.yaml:7:21: spec.source.iscsi.portal: must be host:port, got "192.0.2.1"`,
			`x.yaml:7:37: spec.source.iscsi.iqn: must start with "iqn.", "eui." or "naa.", got "target1"`,
			`x.yaml:7:51: spec.source.iscsi.lun: must be 0 or more, got -1`,
			`x.yaml:7:91: spec.source.iscsi.chap.passwordFile: must be an absolute path, got "chap"`,
		}},
		{"iscsi chap incomplete and bad port", vol + "  source:\n    iscsi: {portal: \"h:0\", iqn: eui.02004567A425678D, chap: {}}\n", []string{
			`x.yaml:7:21: spec.source.iscsi.portal: port must be 1 to 65535, got "0"`,
			`x.yaml:7:57: spec.source.iscsi.chap.passwordFile: required`,
			`x.yaml:7:57: spec.source.iscsi.chap.username: required`,
		}},
		{"nvme", vol + "  source:\n    nvme: {transport: fc, port: 70000, nqn: data}\n", []string{
			`x.yaml:7:5: spec.source.nvme.address: required`,
			`x.yaml:7:5: spec.source.nvme.namespace: must be 1 or more, got 0`,
			`x.yaml:7:24: spec.source.nvme.transport: must be tcp or rdma, got "fc"`,
			`x.yaml:7:34: spec.source.nvme.port: must be 1 to 65535, got 70000`,
			`x.yaml:7:46: spec.source.nvme.nqn: must start with "nqn.", got "data"`,
		}},
		{"device two identities", vol + "  source:\n    device: {path: /dev/sdb, serial: S123}\n", []string{
			`x.yaml:7:5: spec.source.device: exactly one of path, serial, wwn is required, got path and serial`,
		}},
		{"device none", vol + "  source:\n    device: {}\n", []string{
			`x.yaml:7:5: spec.source.device: exactly one of path, serial, wwn is required, got none`,
		}},
		{"device outside /dev", vol + "  source:\n    device: {path: /srv/disk}\n", []string{
			`x.yaml:7:19: spec.source.device.path: must be under /dev`,
		}},
		{"directory", vol + "  source:\n    directory: {path: /srv/../srv/x, create: {mode: \"0999\", uid: -1}}\n", []string{
			`x.yaml:7:22: spec.source.directory.path: must be a clean path (did you mean "/srv/x"?)`,
			`x.yaml:7:51: spec.source.directory.create.mode: must be an octal mode like "0750", got "0999"`,
			`x.yaml:7:64: spec.source.directory.create.uid: must be 0 or more, got -1`,
		}},
		{"tmpfs without size", vol + "  source:\n    tmpfs: {}\n", []string{
			`x.yaml:7:5: spec.source.tmpfs.size: required`,
		}},
		{"mount", mnt + "  volume: Data\n  path: /dev/x\n  subPath: logs\n", []string{
			`x.yaml:6:11: spec.volume: must be lowercase letters, digits and '-', starting and ending with a letter or digit, got "Data"`,
			`x.yaml:7:9: spec.path: must not be /dev or under it`,
			`x.yaml:8:12: spec.subPath: not supported yet (planned)`,
		}},
		{"mount without volume and path", mnt + "  readOnly: true\n", []string{
			`x.yaml:5:1: spec.path: required`,
			`x.yaml:5:1: spec.volume: required`,
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
			`x.yaml:6:27: spec.source.tmpfs.size: anchors are not allowed (&s)`,
			`x.yaml:9:7: spec.mounts[1]: aliases are not allowed (*s)`,
		}},
		{"merge key", vol + "  source: {tmpfs: {size: 1Mi}}\n  <<: {state: absent}\n", []string{
			`x.yaml:7:3: spec.<<: unknown field`,
		}},
		{"custom tag", vol + "  source: {tmpfs: {size: !secret 1Mi}}\n", []string{
			`x.yaml:6:26: spec.source.tmpfs.size: custom tag !secret is not supported`,
		}},
		{"nested too deeply", vol + "  source: {tmpfs: {size: 1Mi}}\n  x: " + strings.Repeat("[", 20) + strings.Repeat("]", 20) + "\n", []string{
			`x.yaml:7:18: spec.x[0][0][0][0][0][0][0][0][0][0][0][0][0]: nested too deeply (more than 16 levels)`,
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
			`x.yaml:13:9: spec.path: must be an absolute path, got "x"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, probs := ParseBytes("x.yaml", []byte(tt.in), testOpts)
			if got := render(probs); !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tt.want)
			}
			if objs != nil {
				t.Errorf("a file with problems returned %d objects", len(objs))
			}
		})
	}
}

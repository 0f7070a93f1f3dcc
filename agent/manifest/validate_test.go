package manifest_test

import (
	"strings"
	"testing"
)

// An object's own fields: apiVersion aside, its name, spec and state.
func TestValidateObjectProblems(t *testing.T) {
	problemCases(t, []problemCase{
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
		{"no spec", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: data}\n", []string{
			`x.yaml:1:1: spec: required`,
			`x.yaml:1:1: spec.source: exactly one of loop, iscsi, nvme, device, directory, tmpfs is required, got none`,
		}},
		{"bad state", vol + "  state: gone\n  source: {tmpfs: {size: 1Mi}}\n", []string{
			`x.yaml:6:10: spec.state: must be present or absent, got "gone"`,
		}},
	})
}

// A volume's source: one kind, a filesystem or a raw mount, the loop file.
func TestValidateSourceProblems(t *testing.T) {
	problemCases(t, []problemCase{
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
	})
}

// The filesystem block, and each source kind's own fields.
func TestValidateFilesystemAndKindProblems(t *testing.T) {
	problemCases(t, []problemCase{
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
	})
}

// Where volumes are published: volume mounts and Mount objects.
func TestValidateTargetProblems(t *testing.T) {
	problemCases(t, []problemCase{
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
		{"mount", mnt + "  volume: Data\n  path: /dev/x\n  subPath: ../logs\n", []string{
			`x.yaml:6:11: spec.volume: must be lowercase letters, digits and '-', starting and ending with a letter or digit, got "Data"`,
			`x.yaml:7:9: spec.path: must not be /dev or under it`,
			`x.yaml:8:12: spec.subPath: must not contain "..", got "../logs"`,
		}},
		{"mount without volume and path", mnt + "  readOnly: true\n", []string{
			`x.yaml:5:1: spec.volume: required`,
			`x.yaml:5:1: spec.path: required`,
		}},
	})
}

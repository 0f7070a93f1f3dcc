package manifest_test

import (
	"strings"
	"testing"
)

// problemCase is a file x.yaml holding in, refused as a whole with
// exactly want.
type problemCase struct {
	name string
	in   string
	want []string
}

func problemCases(t *testing.T, tests []problemCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantProblems(t, tt.in, tt.want) })
	}
}

// What the YAML decoder refuses: syntax, types, unknown fields, documents.
func TestParseBytesDecodeProblems(t *testing.T) {
	problemCases(t, []problemCase{
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
	})
}

package partition_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/partition"
)

func problems(t *testing.T, file, doc string) []string {
	t.Helper()
	_, probs := manifest.ParseBytes(file, []byte(doc), manifest.Options{Kinds: kinds.Manifest(kinds.All())})
	var got []string
	for _, p := range probs {
		got = append(got, p.Error())
	}
	return got
}

func TestCheck(t *testing.T) {
	const head = "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: v}\nspec:\n  filesystem: {type: ext4}\n  source:\n    "
	cases := []struct{ name, src, want string }{
		{"good size", "partition: {disk: {serial: S1}, label: data, size: 1Gi}", ""},
		{"good grow", "partition: {disk: {match: 'disk.transport == \"loop\"'}, label: data, grow: true}", ""},
		{"good disk", "disk: {match: 'disk.size > 1 * GiB'}", ""},
		{"no disk", "partition: {label: data, size: 1Gi}", "v.yaml:7:5: spec.source.partition.disk: exactly one of match, serial, wwn, path is required, got none"},
		{"two disks", "partition: {disk: {serial: a, wwn: b}, label: data, size: 1Gi}", "v.yaml:7:17: spec.source.partition.disk: exactly one of match, serial, wwn, path is required, got serial and wwn"},
		{"size and grow", "partition: {disk: {serial: a}, label: data, size: 1Gi, grow: true}", "v.yaml:7:55: spec.source.partition.size: set exactly one of size and grow: true"},
		{"neither", "partition: {disk: {serial: a}, label: data}", "v.yaml:7:5: spec.source.partition: one of size (e.g. 20Gi) and grow: true is required"},
		{"no label", "partition: {disk: {serial: a}, grow: true}", "v.yaml:7:5: spec.source.partition.label: required: the partition's GPT name"},
		{"long label", "partition: {disk: {serial: a}, grow: true, label: " + strings.Repeat("x", 37) + "}", "longer than 36"},
		{"bad path", "partition: {disk: {path: /srv/x}, label: a, grow: true}", "v.yaml:7:30: spec.source.partition.disk.path: must be under /dev"},
		{"cel syntax", "partition: {disk: {match: 'disk.size >'}, label: a, grow: true}", "spec.source.partition.disk.match: expression line 1 column"},
		{"cel field", "disk: {match: 'disk.colour == \"red\"'}", "v.yaml:7:19: spec.source.disk.match: expression line 1 column 5: undefined field 'colour'"},
		{"cel not bool", "disk: {match: 'disk.size'}", "spec.source.disk.match: expression line 1 column 1: the expression is a int"},
		{"no match", "disk: {}", "spec.source.disk.match: required"},
	}
	for _, c := range cases {
		got := problems(t, "v.yaml", head+c.src+"\n")
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: %q, want none", c.name, got)
		case c.want != "" && !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, c.want) }):
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// Several partitions on one disk are the point; one label twice is refused.
func TestOneLabelPerDisk(t *testing.T) {
	doc := func(name, label string) string {
		return "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: " + name + "}\nspec:\n  filesystem: {type: ext4}\n  source:\n    partition: {disk: {serial: S1}, label: " + label + ", size: 1Gi}\n"
	}
	validate := func(s string) []manifest.Problem {
		p := t.TempDir() + "/a.yaml"
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return manifest.Validate([]string{p}, manifest.Options{Kinds: kinds.Manifest(kinds.All())})
	}
	if got := validate(doc("one", "a") + "---\n" + doc("two", "b")); len(got) > 0 {
		t.Errorf("two labels on one disk: %v", got)
	}
	got := validate(doc("one", "a") + "---\n" + doc("two", "a"))
	if len(got) != 1 || got[0].Field != "spec.source.partition.label" {
		t.Errorf("one label twice: %q, want the second refused", got)
	}
	grow := func(name string) string {
		return "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: " + name + "}\nspec:\n  filesystem: {type: ext4}\n  source:\n    partition: {disk: {serial: S1}, label: " + name + ", grow: true}\n"
	}
	got = validate(grow("one") + "---\n" + grow("two"))
	if len(got) != 1 || got[0].Field != "spec.source.partition.grow" {
		t.Errorf("two partitions taking the rest of one disk: %q, want the second refused", got)
	}
}

func TestIdentityRoundTrip(t *testing.T) {
	for _, label := range []string{"data", `we"ird@:x`, "ünï"} {
		id := partition.Identity(label, "device:serial:S1")
		l, d, err := partition.ParseIdentity(id)
		if err != nil || l != label || d != "device:serial:S1" {
			t.Errorf("%q: %q %q %v", id, l, d, err)
		}
	}
	for _, bad := range []string{"", "partition:", `partition:"a"`, `partition:"a"@loop:x`, `device:serial:S1`} {
		if _, _, err := partition.ParseIdentity(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

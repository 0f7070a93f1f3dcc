package lvm_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
)

func TestCheckCreateVolumeGroup(t *testing.T) {
	const head = "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: v}\nspec:\n  filesystem: {type: ext4}\n  source:\n    lvm:\n      volumeGroup: vg0\n      size: 1Gi\n      createVolumeGroup: "
	cases := []struct{ name, src, want string }{
		{"good", `{disks: 'disk.serial.startsWith("VG")', extentSize: 8Mi, grow: true}`, ""},
		{"lvm2's default extent", `{disks: 'disk.blank'}`, ""},
		{"no selector", `{grow: true}`, "spec.source.lvm.createVolumeGroup.disks: required"},
		{"a selector that does not compile", `{disks: 'disk.nope == 1'}`, "spec.source.lvm.createVolumeGroup.disks: expression line 1"},
		{"an extent not a power of two", `{disks: 'disk.blank', extentSize: 3Mi}`, "spec.source.lvm.createVolumeGroup.extentSize: 3Mi is not a power of two"},
		{"an extent under 1Ki", `{disks: 'disk.blank', extentSize: 512}`, "createVolumeGroup.extentSize"},
		{"unknown field", `{disks: 'disk.blank', pools: []}`, "pools"},
		{"thin pools", `{disks: 'disk.blank', thinPools: [{name: pool0, size: 1Gi, metadataSize: 16Mi}, {name: pool1, size: 1Gi}]}`, ""},
		{"a pool without a size", `{disks: 'disk.blank', thinPools: [{name: pool0}]}`, "spec.source.lvm.createVolumeGroup.thinPools[0].size: required"},
		{"a pool twice", `{disks: 'disk.blank', thinPools: [{name: p, size: 1Gi}, {name: p, size: 2Gi}]}`, "thinPools[1].name: thin pool p is listed twice"},
		{"a pool with a reserved name", `{disks: 'disk.blank', thinPools: [{name: p_tmeta, size: 1Gi}]}`, "thinPools[0].name: must not contain"},
		{"a bad metadata size", `{disks: 'disk.blank', thinPools: [{name: p, size: 1Gi, metadataSize: lots}]}`, "thinPools[0].metadataSize"},
	}
	for _, c := range cases {
		got := problems(t, head+c.src+"\n")
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: %q, want none", c.name, got)
		case c.want != "" && !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, c.want) }):
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// Two volumes declaring one VG's disks: the later is refused; a volume
// that only names the VG is not.
func TestOneVolumeDeclaresAGroup(t *testing.T) {
	doc := func(name, extra string) string {
		return "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: " + name + "}\nspec:\n  filesystem: {type: ext4}\n  source:\n    lvm: {volumeGroup: vg0, size: 1Gi" + extra + "}\n"
	}
	const decl = ", createVolumeGroup: {disks: 'disk.blank'}"
	p := t.TempDir() + "/a.yaml"
	if err := os.WriteFile(p, []byte(doc("a", decl)+"---\n"+doc("b", decl)+"---\n"+doc("c", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	got := manifest.Validate([]string{p}, manifest.Options{Kinds: kinds.Manifest(kinds.All())})
	if len(got) != 1 || got[0].Field != "spec.source.lvm.createVolumeGroup" || !strings.Contains(got[0].Error(), "volume group vg0") {
		t.Errorf("two volumes declaring vg0's disks: %q, want the second refused naming it", got)
	}
}

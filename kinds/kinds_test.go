package kinds_test

import (
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/kinds/loop"
	"github.com/volumed/volumed/kinds/tmpfs"
)

// TestRegistry holds every kind to what the loader, the core and the
// schema assume of it.
func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range kinds.All() {
		name := k.Name()
		if !regexp.MustCompile(`^[a-z][a-z0-9]*$`).MatchString(name) || seen[name] {
			t.Errorf("kind name %q: must be unique, lowercase letters and digits", name)
		}
		seen[name] = true
		a, b := k.New(), k.New()
		if rv := reflect.ValueOf(a); rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct || a == b {
			t.Errorf("%s: New() = %T; want a new pointer to a struct each time", name, a)
		}
		att := k.Attacher(kind.Env{})
		if att == nil {
			t.Fatalf("%s: no attacher", name)
		}
		// The loader refuses a filesystem block by Staged; the core
		// stages by the Stager interface: they must agree.
		if _, stager := att.(agent.Stager); stager != k.Traits().Staged {
			t.Errorf("%s: Traits().Staged = %v, but its attacher is a Stager: %v", name, k.Traits().Staged, stager)
		}
	}
	// The kinds this build has always had keep their place and roles;
	// a new kind only adds to the lists.
	names := kinds.Manifest(kinds.All()).Names()
	if !slices.Equal(names[:6], []string{"loop", "iscsi", "nvme", "device", "directory", "tmpfs"}) {
		t.Errorf("kinds %q", names)
	}
	for _, n := range []string{"iscsi", "nvme"} {
		if !slices.Contains(kinds.Network(kinds.All()), n) || !slices.Contains(kinds.AwaitDisk(kinds.All()), n) {
			t.Errorf("%s: not among the network kinds %q, or those waiting for a disk %q", n, kinds.Network(kinds.All()), kinds.AwaitDisk(kinds.All()))
		}
	}
	if n := kinds.Network(kinds.All()); slices.Contains(n, "loop") || slices.Contains(n, "device") {
		t.Errorf("network kinds %q", n)
	}
	if !slices.Contains(kinds.AwaitDisk(kinds.All()), "device") || slices.Contains(kinds.AwaitDisk(kinds.All()), "loop") {
		t.Errorf("kinds waiting for a disk %q", kinds.AwaitDisk(kinds.All()))
	}
}

// TestCaps: what each kind tells the core of a source. The keys are kept
// in the state file (a record's source) and must not change wording.
func TestCaps(t *testing.T) {
	const head = "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: v}\nspec:\n"
	const fs = "  filesystem: {type: ext4}\n"
	cases := []struct {
		name, spec string
		want       manifest.Caps
		claims     []string
	}{
		{"loop", "  source: {loop: {file: /img/a.img, create: {size: 64Mi}}}\n" + fs,
			manifest.Caps{ImageFile: "/img/a.img", Size: 64 << 20, SizeField: "create.size", Key: "loop file /img/a.img"}, []string{"spec.source.loop.file: loop file /img/a.img"}},
		{"loop read-only", "  source: {loop: {file: /img/a.img, readOnly: true}}\n" + fs,
			manifest.Caps{ImageFile: "/img/a.img", ReadOnly: true, Key: "loop file /img/a.img (read-only)"}, []string{"spec.source.loop.file: loop file /img/a.img"}},
		{"iscsi", "  source: {iscsi: {portal: \"192.0.2.1:3260\", iqn: iqn.2026-01.x:t, lun: 2}}\n" + fs,
			manifest.Caps{Key: "iscsi 192.0.2.1:3260 iqn.2026-01.x:t lun 2"}, []string{"spec.source.iscsi: iSCSI LUN 2 of iqn.2026-01.x:t at 192.0.2.1:3260"}},
		{"nvme", "  source: {nvme: {transport: tcp, address: 192.0.2.2, nqn: nqn.2026-01.x:t, namespace: 1}}\n" + fs,
			manifest.Caps{Key: "nvme tcp 192.0.2.2:4420 nqn.2026-01.x:t namespace 1"}, []string{"spec.source.nvme: NVMe namespace 1 of nqn.2026-01.x:t"}},
		{"device", "  source: {device: {serial: S1}}\n" + fs,
			manifest.Caps{Key: "device S1"}, []string{"spec.source.device.serial: device with serial S1"}},
		{"directory", "  source: {directory: {path: /srv/d}}\n",
			manifest.Caps{Key: "directory /srv/d"}, []string{"spec.source.directory.path: directory /srv/d"}},
		{"tmpfs", "  source: {tmpfs: {size: 1Mi}}\n", manifest.Caps{}, nil},
	}
	opts := manifest.Options{Kinds: kinds.Manifest(kinds.All())}
	for _, c := range cases {
		objs, probs := manifest.ParseBytes("v.yaml", []byte(head+c.spec), opts)
		if len(probs) > 0 || len(objs) != 1 {
			t.Errorf("%s: %v", c.name, probs)
			continue
		}
		got := objs[0].Volume.Source.Caps
		var claims []string
		for _, cl := range got.Claims {
			f := "spec.source." + objs[0].Volume.Source.Kind
			if cl.Field != "" {
				f += "." + cl.Field
			}
			claims = append(claims, f+": "+cl.What)
		}
		got.Claims = nil
		if !reflect.DeepEqual(got, c.want) || !slices.Equal(claims, c.claims) {
			t.Errorf("%s: caps %+v, claims %q; want %+v, %q", c.name, got, claims, c.want, c.claims)
		}
	}
}

// TestSpecFromStateFile: a volume rebuilt from an attach intent holds its
// source as the JSON the intent kept; the kind reads it back.
func TestSpecFromStateFile(t *testing.T) {
	objs, probs := manifest.ParseBytes("v.yaml", []byte("apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: v}\nspec:\n  source: {loop: {file: /img/a.img, create: {size: 1Mi}}}\n  filesystem: {type: ext4}\n"),
		manifest.Options{Kinds: kinds.Manifest(kinds.All())})
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	data, err := json.Marshal(objs[0].Volume.Source)
	if err != nil || string(data) != `{"loop":{"file":"/img/a.img","create":{"size":"1Mi"}}}` {
		t.Fatalf("source as JSON: %s, %v", data, err)
	}
	var src manifest.Source
	if err := json.Unmarshal(data, &src); err != nil || src.Kind != loop.Name {
		t.Fatalf("source from JSON: %+v, %v", src, err)
	}
	d := &agent.Desired{Name: "v", Spec: &manifest.VolumeSpec{Source: src}}
	l, err := kind.Spec[loop.Source](d, loop.Name)
	if err != nil || l.File != "/img/a.img" || l.Create.Size != "1Mi" {
		t.Errorf("loop source from JSON: %+v, %v", l, err)
	}
	if _, err := kind.Spec[tmpfs.Source](d, tmpfs.Name); err == nil {
		t.Error("a loop source read as a tmpfs one")
	}
}

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

// goodManifest is a good file of several volumes and a Mount:
// TestParseBytesGood reads it back.
const goodManifest = `# shipped by the image
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

func TestParseBytesGood(t *testing.T) {
	objs, probs := ParseBytes("/etc/volumed/volumes.d/data.yaml", []byte(goodManifest), testOpts)
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

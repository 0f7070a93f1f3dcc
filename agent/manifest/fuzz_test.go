package manifest_test

import (
	"strings"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
)

// FuzzParse feeds arbitrary bytes to the decoder. Beyond not panicking, a
// file is either refused with problems that name it, or accepted with
// objects that satisfy the rules the rest of the agent relies on.
func FuzzParse(f *testing.F) {
	f.Add([]byte(vol + "  source: {loop: {file: /x.img, create: {size: 1Gi}}}\n  filesystem: {type: ext4}\n  mounts: [{path: /srv/x}]\n"))
	f.Add([]byte(mnt + "  volume: data\n  path: /srv/a\n---\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte(`{"apiVersion": "volumed/v1", "kind": "Volume", "metadata": {"name": "a"}, "spec": {"source": {"tmpfs": {"size": "1Mi"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, probs := ParseBytes("f.yaml", data, testOpts)
		if (len(probs) == 0) == (objs == nil) && len(objs) > 0 {
			t.Fatalf("%d objects with %d problems", len(objs), len(probs))
		}
		for _, p := range probs {
			if s := p.Error(); !strings.HasPrefix(s, "f.yaml") || p.Reason == "" {
				t.Fatalf("problem %q does not name the file or has no reason", s)
			}
		}
		for _, o := range objs {
			if CheckName(o.Metadata.Name) != "" {
				t.Fatalf("accepted bad name %q", o.Metadata.Name)
			}
			switch o.Kind {
			case KindVolume:
				if o.Volume == nil || o.Mount != nil || o.Volume.Source.Kind == "" {
					t.Fatalf("accepted volume %+v", o)
				}
				if fs := o.Volume.Filesystem; fs != nil && fs.Format != FormatIfBlank && fs.Format != FormatNever {
					t.Fatalf("accepted format %q", fs.Format)
				}
				for _, m := range o.Volume.Mounts {
					if CheckTarget(m.Path, "/var/lib/volumed") != "" {
						t.Fatalf("accepted target %q", m.Path)
					}
				}
			case KindMount:
				if o.Mount == nil || o.Volume != nil || CheckTarget(o.Mount.Path, "/var/lib/volumed") != "" {
					t.Fatalf("accepted mount %+v", o)
				}
			default:
				t.Fatalf("accepted kind %q", o.Kind)
			}
		}
	})
}

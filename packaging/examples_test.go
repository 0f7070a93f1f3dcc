package packaging_test

import (
	"path/filepath"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
)

// TestExamples holds the shipped examples to what `volumed validate
// packaging/examples` checks, together: each file on its own, and the
// conflicts between them (names, sources, targets), as if all were
// dropped into one volumes.d. The schema test checks them against the
// JSON Schema.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("examples/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples (%v)", err)
	}
	opts := manifest.Options{StateDir: "/var/lib/volumed", Kinds: kinds.Manifest(kinds.All())}
	for _, p := range manifest.Validate([]string{"examples"}, opts) {
		t.Errorf("%v (warning: %v)", p, p.Warning)
	}
	shown := map[string]bool{}
	for _, f := range files {
		objs, probs := manifest.ParseFile(f, opts)
		if len(objs) == 0 && len(probs) == 0 {
			t.Errorf("%s declares nothing", f)
		}
		for _, o := range objs {
			if o.Volume != nil {
				shown[o.Volume.Source.Kind] = true
			}
		}
	}
	// A kind added to kinds.All comes with its example.
	for _, k := range kinds.All() {
		if !shown[k.Name()] {
			t.Errorf("no example in examples/ has a %s source", k.Name())
		}
	}
}

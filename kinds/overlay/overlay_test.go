package overlay_test

import (
	"os"
	"slices"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
)

func TestCheck(t *testing.T) {
	opts := manifest.Options{Kinds: kinds.Manifest(kinds.All())}
	const head = "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: v}\nspec:\n  source:\n    overlay: "
	cases := []struct{ name, src, want string }{
		{"good", "{lower: [/a, /b], upper: /u/up, work: /u/work}", ""},
		{"no lower", "{upper: /u/up, work: /u/work}", "v.yaml:6:5: spec.source.overlay.lower: required: one or more directories"},
		{"relative lower", "{lower: [/a, b], upper: /u/up, work: /u/work}", `v.yaml:6:27: spec.source.overlay.lower[1]: must be an absolute path, got "b"`},
		{"work in upper", "{lower: [/a], upper: /u, work: /u/work}", "v.yaml:6:45: spec.source.overlay.work: must be apart from upper /u, neither inside the other"},
		{"lower in upper", "{lower: [/u/a], upper: /u, work: /w}", "v.yaml:6:23: spec.source.overlay.lower[0]: must be apart from upper /u, neither inside the other"},
		{"with a filesystem", "{lower: [/a], upper: /u, work: /w}\n  filesystem: {type: ext4}", "v.yaml:7:3: spec.filesystem: not allowed with an overlay source"},
	}
	for _, c := range cases {
		_, probs := manifest.ParseBytes("v.yaml", []byte(head+c.src+"\n"), opts)
		var got []string
		for _, p := range probs {
			got = append(got, p.Error())
		}
		if want := []string{c.want}; c.want == "" && len(got) > 0 || c.want != "" && !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// Two volumes cannot share an upper directory: the second is refused.
func TestSharedUpperRefused(t *testing.T) {
	doc := func(name, work string) string {
		return "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: " + name + "}\nspec:\n  source:\n    overlay: {lower: [/a], upper: /u, work: " + work + "}\n"
	}
	dir := t.TempDir()
	writeFile(t, dir+"/a.yaml", doc("one", "/w1")+"---\n"+doc("two", "/w2"))
	probs := manifest.Validate([]string{dir + "/a.yaml"}, manifest.Options{Kinds: kinds.Manifest(kinds.All())})
	if len(probs) != 1 || probs[0].Field != "spec.source.overlay.upper" {
		t.Errorf("problems %v, want the second volume's upper refused", probs)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

package agent

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// docs/architecture.md states the manifest debounce; it once said 100 ms
// while the code settled for 20.
func TestArchitectureDocStatesManifestSettle(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`after a (\d+) ms debounce`).FindSubmatch(doc)
	if m == nil {
		t.Fatal(`docs/architecture.md no longer states the manifest debounce as "after a N ms debounce"`)
	}
	if want := strconv.FormatInt(manifestSettle.Milliseconds(), 10); string(m[1]) != want {
		t.Errorf("docs/architecture.md says a %s ms debounce; manifestSettle is %s ms", m[1], want)
	}
}

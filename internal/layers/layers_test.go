package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestViolations(t *testing.T) {
	m := Module + "/"
	imports := map[string][]string{
		m + "agent":          {m + "store", m + "internal/safepath", "fmt"},
		m + "agent/manifest": {m + "drivers/loop"},
		m + "drivers/loop":   {m + "internal/keyed", m + "agent/api"},
		m + "drivers/iscsi":  {m + "drivers/blockfs", m + "firmware"},
		m + "kinds/loop":     {m + "agent", m + "drivers/loop"},
		m + "internal/x":     {m + "store"},
		m + "cmd/volumed":    {m + "agent", m + "drivers/loop", m + "kinds/loop"},
		m + "store":          {m + "cmd/volumed"},
	}
	got := Violations(Rules(), imports)
	want := []string{
		"agent/manifest (core) imports drivers/loop (drivers)",
		"drivers/loop (drivers) imports agent/api (core)",
		"internal/x (internal) imports store (core)",
		"store (core) imports cmd/volumed (unlayered)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}
}

// TestImportRules checks the module as it is: a change that makes the core
// import a driver (or a driver the core) fails here, not in review.
func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, Module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	imports := map[string][]string{}
	layered := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		imports[f[0]] = f[1:]
		if layerOf(Rules(), f[0]) != nil {
			layered++
		}
	}
	if layered < 10 {
		t.Fatalf("only %d packages fall under a layer; the rules no longer match the tree", layered)
	}
	for _, v := range Violations(Rules(), imports) {
		t.Error(v)
	}
}

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

func TestPureViolations(t *testing.T) {
	m := Module + "/"
	imports := map[string][]string{
		m + "agent/decide": {"fmt", "slices", "os", "os/exec", "syscall", "golang.org/x/sys/unix", "go.etcd.io/bbolt",
			m + "agent/manifest", m + "store/record", m + "store", m + "agent", m + "internal/uevent", m + "drivers/loop", m + "kinds/loop"},
		m + "store/record": {"time", m + "agent/manifest"},
		m + "agent":        {"os", m + "store"},
	}
	got := PureViolations(PureRules(), imports)
	want := []string{
		"agent/decide (pure) imports github.com/volumed/volumed/agent",
		"agent/decide (pure) imports github.com/volumed/volumed/drivers/loop",
		"agent/decide (pure) imports github.com/volumed/volumed/internal/uevent",
		"agent/decide (pure) imports github.com/volumed/volumed/kinds/loop",
		"agent/decide (pure) imports github.com/volumed/volumed/store",
		"agent/decide (pure) imports go.etcd.io/bbolt",
		"agent/decide (pure) imports golang.org/x/sys/unix",
		"agent/decide (pure) imports os",
		"agent/decide (pure) imports os/exec",
		"agent/decide (pure) imports syscall",
		"store/record (pure) imports github.com/volumed/volumed/agent/manifest",
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
	// The pure packages must be there for their rule to hold anything.
	for _, r := range PureRules() {
		if _, ok := imports[Module+"/"+r.Package]; !ok {
			t.Errorf("pure package %s is not in the module: the rule checks nothing", r.Package)
		}
	}
	for _, v := range PureViolations(PureRules(), imports) {
		t.Error(v)
	}
}

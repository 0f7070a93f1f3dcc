package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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

// docs/architecture.md says where each rule lives: every file of
// agent/decide is named there, and every port is in agent/ports.go.
func TestArchitectureDocNamesWhereRulesLive(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("decide/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in agent/decide (%v)", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "decide/doc.go" {
			continue
		}
		if !strings.Contains(string(doc), "`"+f+"`") {
			t.Errorf("docs/architecture.md does not name %s in its table of where a rule lives", f)
		}
	}
	own, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	ports := 0
	for _, f := range own {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range pf.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, sp := range g.Specs {
				ts := sp.(*ast.TypeSpec)
				if _, ok := ts.Type.(*ast.InterfaceType); !ok {
					continue
				}
				if f != "ports.go" {
					t.Errorf("%s declares interface %s: the core's ports are in ports.go (docs/architecture.md says so)", f, ts.Name.Name)
				}
				ports++
			}
		}
	}
	if ports == 0 {
		t.Error("no interface found in agent/: the scan is broken")
	}
}

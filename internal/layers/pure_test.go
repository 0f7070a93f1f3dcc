package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/generated"
)

// A pure package may import the data of the module packages it names
// (agent/manifest reads files, so importing it must not mean calling
// it): of them it uses types and constants only, never a function or a
// variable.
func TestPureUsesDataOnly(t *testing.T) {
	root, err := generated.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range PureRules() {
		decls := map[string]map[string]token.Token{} // import path → name → kind
		for _, dep := range r.MayUse {
			decls[Module+"/"+dep] = topLevel(t, filepath.Join(root, dep))
		}
		used := 0
		for _, f := range parseDir(t, filepath.Join(root, r.Package)) {
			names := map[string]string{} // local name → import path
			for _, im := range f.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				if _, ok := decls[p]; !ok {
					continue
				}
				local := filepath.Base(p)
				if im.Name != nil {
					local = im.Name.Name
				}
				names[local] = p
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok || names[x.Name] == "" {
					return true
				}
				used++
				switch kind := decls[names[x.Name]][sel.Sel.Name]; kind {
				case token.TYPE, token.CONST:
				default:
					t.Errorf("%s uses %s.%s (%v): a pure package uses the data of %s, never its code", r.Package, x.Name, sel.Sel.Name, kind, names[x.Name])
				}
				return true
			})
		}
		if len(r.MayUse) > 0 && used == 0 {
			t.Errorf("%s uses nothing of %v by this test's scan: the scan is broken", r.Package, r.MayUse)
		}
	}
}

// parseDir parses the package's non-test Go files in dir.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// topLevel says what each top-level name of the package in dir is:
// token.TYPE, CONST, VAR or FUNC.
func topLevel(t *testing.T, dir string) map[string]token.Token {
	t.Helper()
	out := map[string]token.Token{}
	for _, f := range parseDir(t, dir) {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					out[d.Name.Name] = token.FUNC
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						out[s.Name.Name] = token.TYPE
					case *ast.ValueSpec:
						for _, n := range s.Names {
							out[n.Name] = d.Tok
						}
					}
				}
			}
		}
	}
	return out
}

// Package toolscan finds, in Go source, the names of the programs the code
// runs: the string literals that reach the program argument of
// exec.Command, exec.CommandContext, exec.LookPath or testtool.Need,
// directly or through a function of the same package that passes one of
// its parameters on as the program (a runner such as run(ctx, "mkfs.ext4",
// ...)), a variable assigned literals (prog, args = "e2fsck", ...), a
// range over a list of literals, or a method returning a literal
// (c.bin()). It also reads hostcheck.Program literals, the programs the
// drivers declare.
//
// internal/testtool's registry test holds the suite to it: a program that
// a test or a driver runs and the registry lacks fails there, so the list
// the fresh-machine test checks cannot drift from what the suite calls. A
// name built at run time (os.Args[0], a path from a flag) is no tool of
// the machine's and is not found.
package toolscan

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Use is one program name and where the code names it.
type Use struct {
	Name string
	At   string // file:line
}

// Dir scans every .go file under root (a module), package by package,
// skipping testdata, hidden directories and vendor.
func Dir(root string) ([]Use, error) {
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			pkgs[filepath.Dir(p)] = append(pkgs[filepath.Dir(p)], p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Use
	for dir, files := range pkgs {
		srcs := map[string][]byte{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			rel, _ := filepath.Rel(root, f)
			srcs[filepath.Join(filepath.Base(root), rel)] = b
		}
		uses, err := Package(srcs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		out = append(out, uses...)
	}
	sortUses(out)
	return out, nil
}

func dedupe(us []Use) []Use {
	sortUses(us)
	out := us[:0]
	for i, u := range us {
		if i == 0 || u != us[i-1] {
			out = append(out, u)
		}
	}
	return out
}

func sortUses(us []Use) {
	sort.Slice(us, func(i, j int) bool {
		if us[i].Name != us[j].Name {
			return us[i].Name < us[j].Name
		}
		return us[i].At < us[j].At
	})
}

// Package scans the files of one directory (file name → source). A
// directory may hold a package and its _test package; they are scanned as
// one, which finds a runner of either.
func Package(files map[string][]byte) ([]Use, error) {
	s := &scan{fset: token.NewFileSet(), funcs: map[string]*ast.FuncDecl{}, vars: map[string]ast.Expr{}, runners: map[string]int{}}
	var parsed []*ast.File
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := parser.ParseFile(s.fset, n, files[n], 0)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, f)
		s.declare(f)
	}
	// A runner's callers are found only once the runner is known, and a
	// runner of a runner after that: repeat until nothing new is learnt.
	for {
		known := len(s.runners)
		s.uses = nil
		for _, f := range parsed {
			s.file(f)
		}
		if len(s.runners) == known {
			break
		}
	}
	return dedupe(s.uses), nil
}

type scan struct {
	fset    *token.FileSet
	funcs   map[string]*ast.FuncDecl // by name; methods by name too
	vars    map[string]ast.Expr      // package-level var and const values
	runners map[string]int           // function name → index of its program parameter
	uses    []Use
}

func (s *scan) declare(f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			s.funcs[d.Name.Name] = d
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				vs, ok := sp.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						s.vars[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
}

func (s *scan) file(f *ast.File) {
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				for _, arg := range s.programArgs(n) {
					s.program(fd, arg)
				}
			case *ast.CompositeLit:
				s.hostcheckProgram(n)
			}
			return true
		})
	}
	for _, d := range f.Decls {
		if gd, ok := d.(*ast.GenDecl); ok {
			ast.Inspect(gd, func(n ast.Node) bool {
				if cl, ok := n.(*ast.CompositeLit); ok {
					s.hostcheckProgram(cl)
				}
				return true
			})
		}
	}
}

// programArgs returns the arguments of call that name a program.
func (s *scan) programArgs(call *ast.CallExpr) []ast.Expr {
	at := func(i int) []ast.Expr {
		if i < len(call.Args) {
			return call.Args[i : i+1]
		}
		return nil
	}
	switch fn := call.Fun.(type) {
	case *ast.SelectorExpr:
		pkg, ok := fn.X.(*ast.Ident)
		if !ok {
			return nil
		}
		switch pkg.Name + "." + fn.Sel.Name {
		case "exec.Command", "exec.LookPath":
			return at(0)
		case "exec.CommandContext":
			return at(1)
		case "testtool.Need":
			if len(call.Args) > 2 {
				return call.Args[2:]
			}
		}
	case *ast.Ident:
		if fn.Name == "Need" { // within package testtool
			if len(call.Args) > 2 {
				return call.Args[2:]
			}
			return nil
		}
		if i, ok := s.runners[fn.Name]; ok {
			if fd := s.funcs[fn.Name]; fd != nil && isVariadicAt(fd, i) && i < len(call.Args) {
				return call.Args[i:]
			}
			return at(i)
		}
	}
	return nil
}

// program records the literals e can hold, in the function fd.
func (s *scan) program(fd *ast.FuncDecl, e ast.Expr) {
	s.literals(fd, e, 0, func(lit *ast.BasicLit) {
		name, err := strconv.Unquote(lit.Value)
		if err != nil || name == "" {
			return
		}
		p := s.fset.Position(lit.Pos())
		s.uses = append(s.uses, Use{Name: name, At: fmt.Sprintf("%s:%d", p.Filename, p.Line)})
	})
}

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

const maxDepth = 8

func (s *scan) literals(fd *ast.FuncDecl, e ast.Expr, depth int, found func(*ast.BasicLit)) {
	if depth > maxDepth || e == nil {
		return
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			found(e)
		}
	case *ast.ParenExpr:
		s.literals(fd, e.X, depth+1, found)
	case *ast.CompositeLit:
		for _, el := range e.Elts {
			s.literals(fd, el, depth+1, found)
		}
	case *ast.IndexExpr:
		if k, ok := intLit(e.Index); ok {
			s.elementLiterals(fd, e.X, k, depth+1, found)
			return
		}
		s.literals(fd, e.X, depth+1, found)
	case *ast.CallExpr:
		s.callLiterals(fd, e, depth, found)
	case *ast.Ident:
		s.identLiterals(fd, e, depth, found)
	}
}

// callLiterals: testtool.Need(t, "pkg", "prog")[0] gives its programs;
// orDefault(r.Path, "iscsiadm") the literals it passes to parameters the
// callee returns; c.bin() the literals its body returns.
func (s *scan) callLiterals(fd *ast.FuncDecl, call *ast.CallExpr, depth int, found func(*ast.BasicLit)) {
	if args := s.programArgs(call); len(args) > 0 {
		for _, a := range args {
			s.literals(fd, a, depth+1, found)
		}
		return
	}
	name := ""
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		name = fn.Name
	case *ast.SelectorExpr:
		name = fn.Sel.Name
	}
	callee := s.funcs[name]
	if callee == nil || callee.Body == nil {
		return
	}
	ast.Inspect(callee.Body, func(n ast.Node) bool {
		r, ok := n.(*ast.ReturnStmt)
		if !ok || len(r.Results) != 1 {
			return true
		}
		if id, ok := r.Results[0].(*ast.Ident); ok {
			if i, ok := paramIndex(callee, id.Name); ok {
				if i < len(call.Args) {
					s.literals(fd, call.Args[i], depth+1, found)
				}
				return true
			}
		}
		if len(call.Args) == 0 {
			s.literals(callee, r.Results[0], depth+1, found)
		}
		return true
	})
}

// identLiterals follows a name: a parameter of fd makes fd a runner; a
// local variable gives what is assigned to it (or ranged over into it);
// a package-level one its value.
func (s *scan) identLiterals(fd *ast.FuncDecl, id *ast.Ident, depth int, found func(*ast.BasicLit)) {
	if i, ok := paramIndex(fd, id.Name); ok {
		s.runners[fd.Name.Name] = i
		return
	}
	local := false
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if li, ok := l.(*ast.Ident); ok && li.Name == id.Name {
					local = true
					if len(n.Rhs) == len(n.Lhs) {
						s.literals(fd, n.Rhs[i], depth+1, found)
					}
				}
			}
		case *ast.ValueSpec:
			for i, vn := range n.Names {
				if vn.Name == id.Name {
					local = true
					if i < len(n.Values) {
						s.literals(fd, n.Values[i], depth+1, found)
					}
				}
			}
		case *ast.RangeStmt:
			if v, ok := n.Value.(*ast.Ident); ok && v.Name == id.Name {
				local = true
				s.literals(fd, n.X, depth+1, found)
			}
		}
		return true
	})
	if v, ok := s.vars[id.Name]; ok && !local {
		s.literals(fd, v, depth+1, found)
	}
}

// paramIndex is the position of the parameter called name in fd's
// signature, counting each name of a grouped parameter.
func paramIndex(fd *ast.FuncDecl, name string) (int, bool) {
	i := 0
	for _, f := range fd.Type.Params.List {
		if len(f.Names) == 0 {
			i++
			continue
		}
		for _, n := range f.Names {
			if n.Name == name {
				return i, true
			}
			i++
		}
	}
	return 0, false
}

func isVariadicAt(fd *ast.FuncDecl, i int) bool {
	list := fd.Type.Params.List
	if len(list) == 0 {
		return false
	}
	last := list[len(list)-1]
	if _, ok := last.Type.(*ast.Ellipsis); !ok {
		return false
	}
	n := 0
	for _, f := range list {
		n += max(len(f.Names), 1)
	}
	return i == n-1
}

// hostcheckProgram reads hostcheck.Program{Name, Why, Package} literals
// (keyed or not), also as elements of slices and maps of them.
func (s *scan) hostcheckProgram(cl *ast.CompositeLit) {
	if cl.Type != nil {
		s.programsIn(cl, cl.Type)
	}
}

func (s *scan) programsIn(cl *ast.CompositeLit, typ ast.Expr) {
	switch t := typ.(type) {
	case *ast.ArrayType:
		for _, el := range cl.Elts {
			if inner, ok := el.(*ast.CompositeLit); ok && inner.Type == nil {
				s.programsIn(inner, t.Elt)
			}
		}
	case *ast.MapType:
		for _, el := range cl.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if inner, ok := kv.Value.(*ast.CompositeLit); ok && inner.Type == nil {
					s.programsIn(inner, t.Value)
				}
			}
		}
	default:
		if isProgramType(typ) {
			s.programFields(cl)
		}
	}
}

func (s *scan) programFields(cl *ast.CompositeLit) {
	if len(cl.Elts) == 0 {
		return
	}
	first := cl.Elts[0]
	for _, el := range cl.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
				first = kv.Value
			}
		}
	}
	if kv, ok := first.(*ast.KeyValueExpr); ok {
		first = kv.Value
	}
	if lit, ok := first.(*ast.BasicLit); ok && lit.Kind == token.STRING {
		name, err := strconv.Unquote(lit.Value)
		if err == nil && name != "" {
			p := s.fset.Position(lit.Pos())
			s.uses = append(s.uses, Use{Name: name, At: fmt.Sprintf("%s:%d", p.Filename, p.Line)})
		}
	}
}

func isProgramType(e ast.Expr) bool {
	switch t := e.(type) {
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		return ok && x.Name == "hostcheck" && t.Sel.Name == "Program"
	case *ast.Ident:
		return t.Name == "Program"
	}
	return false
}

func intLit(e ast.Expr) (int, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		return 0, false
	}
	k, err := strconv.Atoi(lit.Value)
	return k, err == nil
}

// elementLiterals: tool[0], where tool ranges over rows such as
// [][2]string{{"qemu-img", "qemu-utils"}}, is each row's element k (the
// program, not its package). A name that is no range over rows falls
// back to all its literals.
func (s *scan) elementLiterals(fd *ast.FuncDecl, x ast.Expr, k, depth int, found func(*ast.BasicLit)) {
	id, ok := x.(*ast.Ident)
	if !ok || fd.Body == nil {
		s.literals(fd, x, depth, found)
		return
	}
	var rows *ast.CompositeLit
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if r, ok := n.(*ast.RangeStmt); ok {
			if v, ok := r.Value.(*ast.Ident); ok && v.Name == id.Name {
				rows = s.composite(r.X)
			}
		}
		return rows == nil
	})
	if rows == nil {
		s.literals(fd, x, depth, found)
		return
	}
	for _, el := range rows.Elts {
		if row, ok := el.(*ast.CompositeLit); ok && k < len(row.Elts) {
			s.literals(fd, row.Elts[k], depth+1, found)
		}
	}
}

// composite is the composite literal e is, or a package-level variable
// holding one.
func (s *scan) composite(e ast.Expr) *ast.CompositeLit {
	if id, ok := e.(*ast.Ident); ok {
		e = s.vars[id.Name]
	}
	cl, _ := e.(*ast.CompositeLit)
	return cl
}

// Following an expression back to the string literals it may hold:
// through parameters, variables, ranges, calls and composite literals.

package toolscan

import (
	"go/ast"
	"go/token"
	"strconv"
)

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

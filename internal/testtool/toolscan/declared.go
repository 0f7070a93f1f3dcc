// Programs the drivers declare as hostcheck.Program literals.

package toolscan

import (
	"fmt"
	"go/ast"
	"go/token"
	"strconv"
)

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

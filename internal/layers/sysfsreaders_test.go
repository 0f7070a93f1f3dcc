package layers

import (
	"go/ast"
	"go/constant"
	"go/types"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/volumed/volumed/internal/generated"
)

// sysfsPackage reads sysfs attributes for everyone else, so that an
// attribute is trimmed, bounded and parsed one way.
const sysfsPackage = "internal/sysfs"

// ownSysfsReaders read files under /sys themselves. firmware reads the
// boot firmware's tables, not a device's attributes: an NBFT is a
// binary ACPI table (/sys/firmware/acpi/tables) up to a size of its own,
// far over the page internal/sysfs bounds an attribute to, and it is
// parsed as untrusted bytes (checksums, offsets); its iBFT attributes
// and the DMI product UUID go through the same bounded reader as the
// /etc files it reads (machine-id, initiatorname.iscsi), which refuses
// an overlong value instead of cutting it short.
var ownSysfsReaders = []string{"firmware"}

// fileReaders are the calls that open or read a file by path, with the
// index of their flags argument (-1: they only read).
var fileReaders = map[string]int{
	"os.ReadFile": -1, "os.Open": -1, "io/ioutil.ReadFile": -1,
	"os.OpenFile": 1, "golang.org/x/sys/unix.Open": 1, "syscall.Open": 1,
}

// sysfsPathFuncs are internal/sysfs's functions that give a path below
// /sys (or below a test's root of the same shape).
var sysfsPathFuncs = []string{"RootOr", "BlockDir", "NumberDir"}

// The shipped code reads sysfs attributes through internal/sysfs but in
// the packages ownSysfsReaders names. A path is followed from where it
// is made ("/sys/...", sysfs.Root, sysfs.RootOr, BlockDir, NumberDir)
// through variables, fields, parameters, results and filepath.Join to
// the call that opens it.
func TestSysfsReaders(t *testing.T) {
	root, err := generated.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &packages.Config{Dir: root, Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		t.Fatal(err)
	}
	readers := map[string][]string{} // package → file:line of each read
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Fatalf("load %s: %v", p.PkgPath, e)
		}
		rel := strings.TrimPrefix(p.PkgPath, Module+"/")
		// test/ holds the harnesses and the bench, which ship nothing.
		if rel == sysfsPackage || rel == "test" || strings.HasPrefix(rel, "test/") {
			continue
		}
		for _, pos := range sysfsReads(p) {
			at, _ := filepath.Rel(root, pos)
			readers[rel] = append(readers[rel], at)
		}
	}
	// The scan must see the reader it allows, or it sees nothing.
	for _, own := range ownSysfsReaders {
		if len(readers[own]) == 0 {
			t.Errorf("%s reads no sysfs file by this test's scan: the scan is broken, or drop it from ownSysfsReaders", own)
		}
	}
	for pkg, ats := range readers {
		if !slices.Contains(ownSysfsReaders, pkg) {
			t.Errorf("%s reads sysfs files itself at %s: go through %s", pkg, strings.Join(ats, ", "), sysfsPackage)
		}
	}
}

// sysfsReads lists where (file:line) the package opens a file for
// reading by a path below /sys.
func sysfsReads(p *packages.Package) []string {
	s := &sysPaths{info: p.TypesInfo, held: map[types.Object]bool{}, funcs: map[types.Object]bool{}, decls: map[types.Object]*ast.FuncDecl{}}
	for _, f := range p.Syntax {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				s.decls[p.TypesInfo.Defs[fd.Name]] = fd
			}
		}
	}
	// What holds a sysfs path is learnt a step at a time (a variable,
	// then the parameter it is passed to, then what that returns):
	// repeat until nothing new is learnt.
	for s.changed = true; s.changed; {
		s.changed = false
		for _, f := range p.Syntax {
			s.learn(f)
		}
	}
	var out []string
	for _, f := range p.Syntax {
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok && s.readsSysfs(c) {
				pos := p.Fset.Position(c.Pos())
				out = append(out, pos.Filename+":"+strconv.Itoa(pos.Line))
			}
			return true
		})
	}
	return out
}

// sysPaths knows which variables, fields and parameters (held) and
// which of the package's functions (funcs) may hold a path below /sys.
type sysPaths struct {
	info    *types.Info
	held    map[types.Object]bool
	funcs   map[types.Object]bool
	decls   map[types.Object]*ast.FuncDecl
	changed bool
}

// mark adds o to set; of the variables only those of a path's type
// (string, []string) hold a path, not the entries or numbers read
// from one.
func (s *sysPaths) mark(set map[types.Object]bool, o types.Object) {
	if v, ok := o.(*types.Var); ok && !pathType(v.Type()) {
		return
	}
	if o != nil && !set[o] {
		set[o] = true
		s.changed = true
	}
}

// markExpr marks what the assignable e names.
func (s *sysPaths) markExpr(e ast.Expr) {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		if o := s.info.Defs[e]; o != nil {
			s.mark(s.held, o)
		} else {
			s.mark(s.held, s.info.Uses[e])
		}
	case *ast.SelectorExpr:
		s.mark(s.held, s.info.Uses[e.Sel])
	case *ast.IndexExpr:
		s.markExpr(e.X)
	}
}

// learn walks f once, marking what is given a sysfs path.
func (s *sysPaths) learn(f *ast.File) {
	var fn types.Object // the function whose body is walked
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			fn = s.info.Defs[n.Name]
		case *ast.AssignStmt:
			s.assign(n.Lhs, n.Rhs)
		case *ast.ValueSpec:
			lhs := make([]ast.Expr, len(n.Names))
			for i, id := range n.Names {
				lhs[i] = id
			}
			s.assign(lhs, n.Values)
		case *ast.RangeStmt:
			if n.Value != nil && s.holds(n.X) {
				s.markExpr(n.Value)
			}
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && s.holds(n.Value) {
				if v, ok := s.info.Uses[k].(*types.Var); ok && v.IsField() {
					s.mark(s.held, v)
				}
			}
		case *ast.CallExpr:
			s.passes(n)
		case *ast.ReturnStmt:
			if slices.ContainsFunc(n.Results, s.holds) {
				s.mark(s.funcs, fn)
			}
		}
		return true
	})
}

func (s *sysPaths) assign(lhs, rhs []ast.Expr) {
	if len(lhs) == len(rhs) {
		for i := range lhs {
			if s.holds(rhs[i]) {
				s.markExpr(lhs[i])
			}
		}
		return
	}
	if len(rhs) == 1 && s.holds(rhs[0]) {
		for _, l := range lhs {
			s.markExpr(l)
		}
	}
}

// passes marks the parameters of the package's own function that c
// passes a sysfs path to.
func (s *sysPaths) passes(c *ast.CallExpr) {
	callee := s.callee(c)
	fd := s.decls[callee]
	if fd == nil {
		return
	}
	var params []types.Object
	for _, f := range fd.Type.Params.List {
		for _, id := range f.Names {
			params = append(params, s.info.Defs[id])
		}
	}
	for i, a := range c.Args {
		if len(params) > 0 && s.holds(a) {
			s.mark(s.held, params[min(i, len(params)-1)])
		}
	}
}

func (s *sysPaths) callee(c *ast.CallExpr) types.Object {
	switch fn := ast.Unparen(c.Fun).(type) {
	case *ast.Ident:
		return s.info.Uses[fn]
	case *ast.SelectorExpr:
		return s.info.Uses[fn.Sel]
	}
	return nil
}

// holds: e may be a path below /sys.
func (s *sysPaths) holds(e ast.Expr) bool {
	if tv, ok := s.info.Types[e]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
		v := constant.StringVal(tv.Value)
		return v == "/sys" || strings.HasPrefix(v, "/sys/")
	}
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return s.held[s.info.Uses[e]]
	case *ast.SelectorExpr:
		return s.held[s.info.Uses[e.Sel]]
	case *ast.BinaryExpr:
		return s.holds(e.X) || s.holds(e.Y)
	case *ast.IndexExpr:
		return s.holds(e.X)
	case *ast.SliceExpr:
		return s.holds(e.X)
	case *ast.CompositeLit:
		return slices.ContainsFunc(e.Elts, s.holds)
	case *ast.KeyValueExpr:
		return s.holds(e.Value)
	case *ast.CallExpr:
		return s.callHolds(e)
	}
	return false
}

// callHolds: internal/sysfs's path functions give a sysfs path, the
// package's own functions one when they return one, and any other call
// that gives a string (filepath.Join, fmt.Sprintf, append) one when it
// is given one.
func (s *sysPaths) callHolds(c *ast.CallExpr) bool {
	callee := s.callee(c)
	if f, ok := callee.(*types.Func); ok && f.Pkg() != nil && f.Pkg().Path() == Module+"/"+sysfsPackage {
		return slices.Contains(sysfsPathFuncs, f.Name())
	}
	if s.decls[callee] != nil {
		return s.funcs[callee]
	}
	return pathType(s.info.TypeOf(c)) && slices.ContainsFunc(c.Args, s.holds)
}

// pathType: t is string or a slice of strings (filepath.Join's
// elements), the types a path is held in.
func pathType(t types.Type) bool {
	if sl, ok := t.Underlying().(*types.Slice); ok {
		t = sl.Elem()
	}
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Info()&types.IsString != 0
}

// readsSysfs: c opens a file below /sys for reading.
func (s *sysPaths) readsSysfs(c *ast.CallExpr) bool {
	f, ok := s.callee(c).(*types.Func)
	if !ok || f.Pkg() == nil || len(c.Args) == 0 {
		return false
	}
	flags, ok := fileReaders[f.Pkg().Path()+"."+f.Name()]
	if !ok || !s.holds(c.Args[0]) {
		return false
	}
	return flags < 0 || flags >= len(c.Args) || !writeOnly(c.Args[flags])
}

// writeOnly: the open flags e name O_WRONLY (a write to an attribute,
// which internal/sysfs does not do).
func writeOnly(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == "O_WRONLY" {
			found = true
		}
		return !found
	})
	return found
}

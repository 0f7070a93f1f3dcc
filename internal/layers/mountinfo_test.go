package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/generated"
)

// mountTablePackage reads the mount table for everyone else.
const mountTablePackage = "drivers/mount/"

// ownMountReaders read the mount table themselves: the one in-use check,
// which internal/ keeps below the drivers; docs/architecture.md names it.
var ownMountReaders = []string{"internal/inuse/inuse.go"}

// mountinfoReaders are the functions of github.com/moby/sys/mountinfo
// that read a mount table.
var mountinfoReaders = []string{"GetMounts", "GetMountsFromReader", "Mounted", "MountedFast", "PidMountInfo"}

// The shipped code reads the mount table through drivers/mount but for
// the files docs/architecture.md names, so that the document stays true.
func TestMountTableReaders(t *testing.T) {
	root, err := generated.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var readers []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			// test/ holds the harnesses and the bench, which ship nothing.
			if rel == "test" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		reads, err := readsMountTable(p)
		if reads {
			readers = append(readers, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The scan must see the package that does read it, or it sees nothing.
	if !slices.ContainsFunc(readers, func(r string) bool { return strings.HasPrefix(r, mountTablePackage) }) {
		t.Fatalf("no file of %s reads the mount table, by this test's scan: the scan is broken", mountTablePackage)
	}
	for _, r := range readers {
		if !strings.HasPrefix(r, mountTablePackage) && !slices.Contains(ownMountReaders, r) {
			t.Errorf("%s reads the mount table itself: go through %s, or add it to ownMountReaders and to docs/architecture.md", r, mountTablePackage)
		}
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ownMountReaders {
		if !slices.Contains(readers, r) {
			t.Errorf("%s no longer reads the mount table: drop it from ownMountReaders and from docs/architecture.md", r)
		}
		if !strings.Contains(string(doc), "`"+r+"`") {
			t.Errorf("docs/architecture.md does not name %s among the mount table's readers", r)
		}
	}
}

// readsMountTable: the Go file at p calls a mountinfo reader or names a
// mountinfo file of /proc.
func readsMountTable(p string) (bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
	if err != nil {
		return false, err
	}
	pkg := ""
	for _, im := range f.Imports {
		if path, _ := strconv.Unquote(im.Path.Value); path == "github.com/moby/sys/mountinfo" {
			pkg = "mountinfo"
			if im.Name != nil {
				pkg = im.Name.Name
			}
		}
	}
	reads := false
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ImportSpec:
			return false // the import's path names the package, not a file
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && pkg != "" && x.Name == pkg && slices.Contains(mountinfoReaders, n.Sel.Name) {
				reads = true
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && strings.Contains(n.Value, "/mountinfo") {
				reads = true
			}
		}
		return !reads
	})
	return reads, nil
}

package testtool

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// libraryDirs are where the dynamic loader of a Debian (multiarch, merged
// /usr or not) finds a library by its soname.
var libraryDirs = []string{"lib/*-linux-gnu", "usr/lib/*-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib"}

// FindLibrary returns the path below root ("/" for this machine) of the
// library a dlopen of soname would load.
func FindLibrary(root, soname string) (string, error) {
	for _, d := range libraryDirs {
		matches, _ := filepath.Glob(filepath.Join(root, d, soname))
		for _, m := range matches {
			if _, err := os.Stat(m); err == nil {
				return m, nil
			}
		}
	}
	return "", fmt.Errorf("%s: in none of /%v below %s", soname, libraryDirs, root)
}

// NeedLibraries reports with Missing each library of the registry that
// tool loads at run time and this machine lacks.
func NeedLibraries(t testing.TB, tool string) {
	t.Helper()
	for _, l := range libraries {
		if l.For != tool {
			continue
		}
		if _, err := FindLibrary("/", l.Soname); err != nil {
			Missing(t, tool+"'s run-time library "+l.Soname, "Debian package "+l.Package, err)
		}
	}
}

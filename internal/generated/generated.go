// Package generated helps the generators of committed files (the manifest
// schema, the man pages) and the tests that fail when a committed file is
// stale: they find the module root and say where two versions part.
package generated

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ModuleRoot finds the directory of this module's go.mod from the working
// directory up, so that `go run` and `go test` work from anywhere inside
// the checkout.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/volumed/volumed\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/volumed/volumed module")
		}
		dir = parent
	}
}

// FirstDifference says where a committed file first differs from what
// was generated.
func FirstDifference(committed, generated []byte) string {
	g, w := strings.Split(string(committed), "\n"), strings.Split(string(generated), "\n")
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d is %q, generated %q", i+1, strings.TrimSpace(g[i]), strings.TrimSpace(w[i]))
		}
	}
	return fmt.Sprintf("%d lines committed, %d generated", len(g), len(w))
}

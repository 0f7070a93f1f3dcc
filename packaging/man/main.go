// Command man writes volumed's man pages into packaging/man:
//
//	go run ./packaging/man        # or: make man
//
// volumed(8) is made from internal/cli, the description of the command
// line that the shell completions are made from too (and that a test of
// cmd/volumed checks against the flags each command parses); volumed.yaml(5)
// from the manifest JSON Schema packaging/schema generates, plus the
// shipped example data-loop.yaml. The test beside this file fails when a
// committed page differs from what these generate now.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/volumed/volumed/internal/generated"
)

// Where the inputs and pages are, from the module root.
const (
	schemaFile  = "packaging/schema/volumed-manifest.schema.json"
	exampleFile = "packaging/examples/data-loop.yaml"
	page8       = "packaging/man/volumed.8"
	page5       = "packaging/man/volumed.yaml.5"
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "man:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := generated.ModuleRoot()
	if err != nil {
		return err
	}
	pages, err := generate(root)
	if err != nil {
		return err
	}
	for name, data := range pages {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// generate returns each page's path (from the module root) and content.
func generate(root string) (map[string][]byte, error) {
	schema, err := os.ReadFile(filepath.Join(root, schemaFile))
	if err != nil {
		return nil, err
	}
	example, err := os.ReadFile(filepath.Join(root, exampleFile))
	if err != nil {
		return nil, err
	}
	five, err := manifestPage(schema, example)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", schemaFile, err)
	}
	return map[string][]byte{page8: commandPage(), page5: five}, nil
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/generated"
	"github.com/volumed/volumed/internal/testtool"
)

// TestManPagesUpToDate fails when internal/cli, the schema or the example
// changed and the committed pages were not regenerated.
func TestManPagesUpToDate(t *testing.T) {
	root, err := generated.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pages, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatalf("%v: run `make man`", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale (%s): run `make man`", name, generated.FirstDifference(got, want))
		}
	}
}

// TestManPagesRender: groff renders each page without a warning, and what
// a reader sees names the fields and flags.
func TestManPagesRender(t *testing.T) {
	groff := testtool.Need(t, "Debian: groff-base (with man-db)", "groff")[0]
	root, err := generated.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for name, wants := range map[string][]string{
		page8: {"volumed wait [--timeout DURATION]", "SIGHUP", "EXIT STATUS", "/var/lib/volumed/state.db", "volumed.yaml(5)"},
		page5: {"spec.source.loop.file", "(string; required; an absolute path)", "spec.mounts[].path", "one of ext4, xfs, btrfs",
			"spec.source.device", "Exactly one of: path, serial, wwn", "kind: Mount"},
	} {
		cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-P", "-cbou", filepath.Join(root, name))
		cmd.Env = append(os.Environ(), "MANWIDTH=200")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Fatalf("groff %s: %v\n%s", name, err, stderr.String())
		}
		text := strings.ReplaceAll(string(out), "\u2010\n", "") // a hyphenated line break
		text = strings.Join(strings.Fields(text), " ")
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("%s as rendered lacks %q", name, w)
			}
		}
	}
}

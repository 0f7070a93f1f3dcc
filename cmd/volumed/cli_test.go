package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/volumed/volumed/internal/cli"
)

// TestCLIDescriptionMatchesFlags: the completions and volumed(8) are made
// from internal/cli; each command's flags there must be the flags the
// command parses (as its -h lists them), so neither can go stale.
func TestCLIDescriptionMatchesFlags(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -(\S+)`)
	for _, c := range cli.Commands() {
		if len(c.Flags) == 0 {
			continue
		}
		// Some commands' flag sets print to the process's stderr.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		saved := os.Stderr
		os.Stderr = w
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), []string{c.Name, "-h"}, &stdout, &stderr)
		os.Stderr = saved
		w.Close()
		piped, _ := io.ReadAll(r)
		r.Close()
		if code != 0 {
			t.Errorf("volumed %s -h: exit %d", c.Name, code)
		}
		var got []string
		for _, m := range flagLine.FindAllStringSubmatch(string(piped)+stderr.String()+stdout.String(), -1) {
			got = append(got, m[1])
		}
		var want []string
		for _, f := range c.Flags {
			want = append(want, f.Name)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("volumed %s parses flags %v; internal/cli describes %v", c.Name, got, want)
		}
	}
}

// TestCLIDescriptionNamesEveryCommand: each command run dispatches is
// described (the hidden __ ones aside), and each described one exists.
func TestCLIDescriptionNamesEveryCommand(t *testing.T) {
	for _, c := range cli.Commands() {
		var stdout, stderr bytes.Buffer
		run(t.Context(), []string{c.Name, "-h"}, &stdout, &stderr)
		if bytes.Contains(stderr.Bytes(), []byte("unknown command")) {
			t.Errorf("internal/cli describes %q, which volumed does not know", c.Name)
		}
	}
}

// TestShippedCompletionsUpToDate: the packages ship packaging/completion,
// which must be what `volumed completion` prints.
func TestShippedCompletionsUpToDate(t *testing.T) {
	for file, want := range map[string]string{
		"../../packaging/completion/volumed.bash": bashCompletion(cli.Commands()),
		"../../packaging/completion/_volumed":     zshCompletion(cli.Commands()),
	} {
		got, err := os.ReadFile(file)
		if err != nil || string(got) != want {
			t.Errorf("%s is stale or missing (%v): run `make completion`", file, err)
		}
	}
}

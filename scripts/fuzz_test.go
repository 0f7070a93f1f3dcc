package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runFuzz runs scripts/fuzz.sh with a go of the test's making that logs
// its arguments, one line per call, and returns the log and the script's
// output and error.
func runFuzz(t *testing.T, env ...string) (calls []string, out string, err error) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "go.log")
	fakeGo := filepath.Join(dir, "go")
	if werr := os.WriteFile(fakeGo, []byte("#!/bin/sh\necho \"$*\" >>"+log+"\n"), 0o755); werr != nil {
		t.Fatal(werr)
	}
	cmd := exec.Command("bash", "fuzz.sh")
	cmd.Env = append(os.Environ(), append([]string{"GO=" + fakeGo}, env...)...)
	b, err := cmd.CombinedOutput()
	logged, rerr := os.ReadFile(log)
	if rerr != nil && !os.IsNotExist(rerr) {
		t.Fatal(rerr)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(logged)), "\n") {
		if l != "" {
			calls = append(calls, l)
		}
	}
	return calls, string(b), err
}

// A duration raced Go 1.26's fuzz coordinator and failed a CI run with
// "context deadline exceeded" and no input (go.dev/issue/75804): by
// default every target runs for a count of executions, under a timeout.
func TestFuzzRunsEachTargetForACount(t *testing.T) {
	calls, out, err := runFuzz(t, "FUZZTIME=")
	if err != nil {
		t.Fatalf("fuzz.sh: %v\n%s", err, out)
	}
	if len(calls) < 10 {
		t.Fatalf("fuzz.sh ran %d fuzz targets, want every one in the module (15 or more):\n%s", len(calls), strings.Join(calls, "\n"))
	}
	for _, c := range calls {
		if !strings.Contains(c, "-fuzztime 100000x") || !strings.Contains(c, "-timeout ") {
			t.Errorf("go %s: want -fuzztime as a count of executions and a -timeout", c)
		}
	}
}

func TestFuzzRefusesADuration(t *testing.T) {
	calls, out, err := runFuzz(t, "FUZZTIME=10s")
	if err == nil {
		t.Fatalf("fuzz.sh with FUZZTIME=10s succeeded, want it refused:\n%s", out)
	}
	if len(calls) != 0 {
		t.Errorf("fuzz.sh ran go although it refused the duration: %q", calls)
	}
	if !strings.Contains(out, "FUZZTIME=10s") || !strings.Contains(out, "count of executions") {
		t.Errorf("fuzz.sh's refusal does not name the value and what to give instead:\n%s", out)
	}
}

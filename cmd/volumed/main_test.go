package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// `volumed version` says which sources this build has and what they need
// of the host.
func TestVersionListsSources(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if want := "sources: loop, iscsi (needs iscsiadm), nvme, device, directory, tmpfs"; !strings.Contains(out.String(), want) {
		t.Errorf("version:\n%s\nwant a line with %q", out.String(), want)
	}
}

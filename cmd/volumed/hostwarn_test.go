package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const xfsManifest = `apiVersion: volumed/v1
kind: Volume
metadata: { name: logs }
spec:
  source:
    loop: { file: /var/lib/images/logs.img, create: { size: 320Mi } }
  filesystem:
    type: xfs
  mounts: [ { path: /srv/logs } ]
`

// TestValidateWarnsOfMissingTools: with no mkfs.xfs on PATH, validate names
// file, line, field and package, exits 0, and 1 with --strict.
func TestValidateWarnsOfMissingTools(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "logs.yaml")
	if err := os.WriteFile(f, []byte(xfsManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir()) // nothing on it
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"validate", f}, &stdout, &stderr); code != 0 {
		t.Fatalf("validate exit %d, want 0 (host warnings are warnings); stderr:\n%s", code, stderr.String())
	}
	want := "warning: " + f + ":8:11: spec.filesystem.type: volume logs: this host lacks mkfs.xfs (formats xfs volumes; install xfsprogs)"
	if !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr:\n%s\nwant a line:\n%s", stderr.String(), want)
	}
	if !strings.Contains(stdout.String(), "ok") {
		t.Errorf("stdout %q, want ok", stdout.String())
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"validate", "--strict", dir}, &stdout, &stderr); code != 1 {
		t.Fatalf("validate --strict exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
}

func TestValidateQuietWhenHostHasTools(t *testing.T) {
	bin := t.TempDir()
	for _, p := range []string{"mkfs.xfs", "xfs_growfs"} {
		if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if data, err := os.ReadFile("/proc/filesystems"); err != nil || !bytes.Contains(data, []byte("\txfs\n")) {
		t.Skip("this kernel has no xfs loaded; hostcheck's own tests cover a module")
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "logs.yaml")
	if err := os.WriteFile(f, []byte(xfsManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"validate", "--strict", f}, &stdout, &stderr); code != 0 || stderr.Len() > 0 {
		t.Fatalf("validate --strict with xfs tools: exit %d, stderr %q; want 0 and nothing", code, stderr.String())
	}
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds"
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
	for _, p := range []string{"mkfs.xfs", "xfs_growfs", "xfs_repair"} {
		if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A host root of its own, whose kernel has xfs and loop whatever this
	// one has loaded.
	root := t.TempDir()
	for _, d := range []string{"proc", "sys/module/loop"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "filesystems"), []byte("nodev\tproc\n\txfs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "logs.yaml")
	if err := os.WriteFile(f, []byte(xfsManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	h := hostcheck.Host{Root: root, Release: "test", LookPath: exec.LookPath}
	var stderr bytes.Buffer
	if n := hostWarnings(h, kinds.All(), validVolumes(t, f), &stderr); n != 0 || stderr.Len() > 0 {
		t.Fatalf("host warnings with xfs tools and xfs in the kernel: %d, %q; want none", n, stderr.String())
	}
	// The same manifest on a host without xfs is warned about, so the
	// silence above is the host's doing.
	if err := os.WriteFile(filepath.Join(root, "proc", "filesystems"), []byte("nodev\tproc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := hostWarnings(h, kinds.All(), validVolumes(t, f), &stderr); n == 0 || !strings.Contains(stderr.String(), "the xfs filesystem") {
		t.Fatalf("host without xfs: %d warnings, %q; want one about the xfs filesystem", n, stderr.String())
	}
}

// validVolumes are the volumes validate accepts in path.
func validVolumes(t *testing.T, path string) []*manifest.Object {
	t.Helper()
	vols, probs := manifest.ValidateVolumes([]string{path}, manifest.Options{Kinds: kinds.Manifest(kinds.All())})
	for _, p := range probs {
		if !p.Warning {
			t.Fatalf("%s: %v", path, p)
		}
	}
	return vols
}

// TestValidateWarnsOfSourceModules: the warning about a source comes from
// the volume's own spec (an NVMe/TCP volume needs nvme-tcp, which this
// host lacks though it has nvme-fabrics) and points at its source.
func TestValidateWarnsOfSourceModules(t *testing.T) {
	root := ext4Host(t, "dev/nvme-fabrics")
	f := filepath.Join(t.TempDir(), "fast.yaml")
	if err := os.WriteFile(f, []byte(`apiVersion: volumed/v1
kind: Volume
metadata: { name: fast }
spec:
  source:
    nvme: { transport: tcp, address: 192.0.2.11, nqn: "nqn.2026-01.com.example:fast", namespace: 1 }
  filesystem: { type: ext4 }
  mounts: [ { path: /srv/fast } ]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	h := hostcheck.Host{Root: root, Release: "test", LookPath: exec.LookPath}
	var stderr bytes.Buffer
	if n := hostWarnings(h, kinds.All(), validVolumes(t, f), &stderr); n != 1 {
		t.Fatalf("%d warnings, want 1 (nvme-tcp); stderr:\n%s", n, stderr.String())
	}
	want := "warning: " + f + ":6:5: spec.source.nvme: volume fast: this host lacks NVMe/TCP in its kernel (no nvme-tcp module in /lib/modules/test; use a kernel with nvme-tcp)\n"
	if stderr.String() != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", stderr.String(), want)
	}
}

// TestValidateWarnsOfEncryption: an encrypted volume on a host without
// cryptsetup, dm-crypt or a TPM2 gets one warning each, at
// spec.encryption; the TPM2 one only when a tpm2 key is named.
func TestValidateWarnsOfEncryption(t *testing.T) {
	root := ext4Host(t)
	h := hostcheck.Host{Root: root, Release: "test", LookPath: exec.LookPath}
	for _, c := range []struct {
		keys string
		want []string
	}{
		{"[{file: /etc/volumed/secrets/v.key}]", []string{"cryptsetup (formats and opens encrypted volumes; install cryptsetup-bin)", "dm-crypt in its kernel"}},
		{"[{file: /etc/volumed/secrets/v.key}, {tpm2: {pcrs: [7]}}]", []string{"cryptsetup", "dm-crypt in its kernel", "/dev/tpmrm0"}},
		{"[{threshold: {n: 1, keys: [{threshold: {n: 1, keys: [{tpm2: {pcrs: [7]}}]}}]}}]", []string{"cryptsetup", "dm-crypt in its kernel", "/dev/tpmrm0"}},
	} {
		f := filepath.Join(t.TempDir(), "v.yaml")
		if err := os.WriteFile(f, []byte(`apiVersion: volumed/v1
kind: Volume
metadata: { name: v }
spec:
  source: { device: { serial: X1 } }
  filesystem: { type: ext4 }
  encryption: { luks2: { keys: `+c.keys+` } }
`), 0o644); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		n := hostWarnings(h, kinds.All(), validVolumes(t, f), &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if n != len(c.want) || len(lines) != len(c.want) {
			t.Fatalf("keys %s: %d warnings, want %d; stderr:\n%s", c.keys, n, len(c.want), stderr.String())
		}
		for i, w := range c.want {
			if !strings.HasPrefix(lines[i], "warning: "+f+":7:3: spec.encryption: volume v: this host lacks "+w) {
				t.Errorf("keys %s: warning %d is %q, want one about %s at spec.encryption", c.keys, i, lines[i], w)
			}
		}
	}
}

// ext4Host is the root of a host whose kernel has ext4 and whose PATH
// (set for the test) has ext4's tools, and nothing else but files.
func ext4Host(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range append([]string{"proc/filesystems"}, files...) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), []byte("\text4\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := t.TempDir()
	for _, p := range []string{"mkfs.ext4", "resize2fs", "e2fsck"} {
		if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	return root
}

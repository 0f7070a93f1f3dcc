package csi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
)

func opts() manifest.Options {
	return manifest.Options{StateDir: "/var/lib/volumed", Kinds: kinds.Manifest(kinds.All())}
}

func TestDesiredFromContext(t *testing.T) {
	r := &Record{VolumeID: "pv-1", StagingPath: "/k/globalmount/", FSType: "xfs", MountFlags: []string{"noatime"},
		Context: map[string]string{
			"loop.file":                   "/images/pv-1.img",
			"loop.create.size":            "1Gi",
			"filesystem.mkfsOptions":      "[-m, crc=1]",
			"csi.storage.k8s.io/pod.name": "ignored",
		},
		Targets: []Target{{Path: "/pods/b", ReadOnly: true}, {Path: "/pods/a"}},
	}
	d, err := desired(VolumeName(r.VolumeID), r, opts())
	if err != nil {
		t.Fatal(err)
	}
	fs := d.Spec.Filesystem
	if d.Name != "csi-pv-1" || d.Kind != "loop" || d.Caps.ImageFile != "/images/pv-1.img" || d.Caps.Size != 1<<30 || d.Block {
		t.Errorf("desired: %+v caps %+v", d, d.Caps)
	}
	if fs == nil || fs.Type != "xfs" || !fs.Grow || strings.Join(fs.MountOptions, ",") != "noatime" || strings.Join(fs.MkfsOptions, " ") != "-m crc=1" {
		t.Errorf("filesystem: %+v", fs)
	}
	if d.StagingPath != "/k/globalmount" || len(d.Targets) != 2 || d.Targets[0].Path != "/pods/a" || !d.Targets[1].ReadOnly {
		t.Errorf("paths: staging %q targets %+v", d.StagingPath, d.Targets)
	}

	// An expansion grows the image the kind keeps.
	r.CapacityBytes = 2 << 30
	if d, err = desired("csi-pv-1", r, opts()); err != nil || d.Caps.Size != 2<<30 {
		t.Errorf("after expand: size %d, %v", d.Caps.Size, err)
	}

	r.Block = true
	if d, err = desired("csi-pv-1", r, opts()); err != nil || d.Spec.Filesystem != nil || !d.Block || d.StagingPath != "" || !d.Targets[0].Block {
		t.Errorf("block: %+v, %v", d, err)
	}
}

func TestDesiredRefusesBadContext(t *testing.T) {
	cases := []struct {
		name string
		ctx  map[string]string
		fs   string
		want string
	}{
		{"unknown field", map[string]string{"loop.fiel": "/x.img"}, "", `spec.source.loop.fiel: unknown field (did you mean "file"?)`},
		{"relative path", map[string]string{"loop.file": "x.img"}, "", "spec.source.loop.file"},
		{"no source", map[string]string{}, "", "spec.source"},
		{"two sources", map[string]string{"loop.file": "/x.img", "device.serial": "S1"}, "", "spec.source"},
		{"bad filesystem", map[string]string{"loop.file": "/x.img"}, "ntfs", "spec.filesystem.type"},
		{"contradicting fs type", map[string]string{"loop.file": "/x.img", "filesystem.type": "xfs"}, "ext4", "contradicts"},
		{"bad list", map[string]string{"loop.file": "/x.img", "filesystem.mkfsOptions": "[a"}, "", "filesystem.mkfsOptions"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &Record{VolumeID: "v", StagingPath: "/s", FSType: c.fs, Context: c.ctx}
			_, err := desired("csi-v", r, opts())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

func TestVolumeName(t *testing.T) {
	if n := VolumeName("pv-data"); n != "csi-pv-data" {
		t.Errorf("VolumeName(pv-data) = %q", n)
	}
	// CSI IDs may be long and hold any character: a stable hash.
	long := VolumeName("projects/x/zones/y/disks/Data_1")
	if long != VolumeName("projects/x/zones/y/disks/Data_1") || manifest.CheckName(long) != "" || long == VolumeName("projects/x/zones/y/disks/Data_2") {
		t.Errorf("VolumeName of an odd ID: %q", long)
	}
}

func TestRecordsSurviveAndSecretsStayPrivate(t *testing.T) {
	rs := records{dir: filepath.Join(t.TempDir(), "csi")}
	files, err := rs.writeSecrets("csi-a", map[string]string{"iscsi.chap.password": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	p := files["iscsi.chap.passwordFile"]
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file %q: %v %v", p, fi, err)
	}
	r := &Record{VolumeID: "a", Context: map[string]string{"iscsi.chap.passwordFile": p}, Targets: []Target{{Path: "/t"}}}
	if err := rs.put("csi-a", r); err != nil {
		t.Fatal(err)
	}
	// A crash mid-write leaves a temporary file: ignored, the old record stands.
	if err := os.WriteFile(rs.path("csi-a")+".tmp", []byte("{broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := rs.load()
	if err != nil || got["csi-a"] == nil || got["csi-a"].Targets[0].Path != "/t" || len(got) != 1 {
		t.Fatalf("load: %+v, %v", got, err)
	}
	b, _ := os.ReadFile(rs.path("csi-a"))
	if strings.Contains(string(b), "s3cret") {
		t.Error("the record holds the secret")
	}
	if err := rs.remove("csi-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("secret left after remove: %v", err)
	}
	if got, _ := rs.load(); len(got) != 0 {
		t.Errorf("record left after remove: %+v", got)
	}
	if _, err := rs.writeSecrets("csi-b", map[string]string{"../x": "v"}); err == nil {
		t.Error("a secret key with a / was accepted")
	}
}

func TestConcurrentCallAborted(t *testing.T) {
	s := &Service{busy: map[string]bool{}}
	release, err := s.claim("csi-a", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.claim("csi-a", "a"); status.Code(err) != codes.Aborted {
		t.Errorf("second call on a busy volume: %v, want Aborted", err)
	}
	if r, err := s.claim("csi-b", "b"); err != nil {
		t.Errorf("another volume: %v", err)
	} else {
		r()
	}
	release()
	if r, err := s.claim("csi-a", "a"); err != nil {
		t.Errorf("after release: %v", err)
	} else {
		r()
	}
}

func TestHostPrivileges(t *testing.T) {
	for _, c := range []struct {
		name  string
		ctx   map[string]string
		flags []string
		block bool
		want  string
	}{
		{"plain", nil, []string{"noatime"}, false, ""},
		{"allowSuid", map[string]string{"filesystem.allowSuid": "true"}, nil, false, "setuid (filesystem.allowSuid)"},
		{"allowDev", map[string]string{"filesystem.allowDev": "true"}, nil, false, "device nodes (filesystem.allowDev)"},
		{"both", map[string]string{"filesystem.allowSuid": "true", "filesystem.allowDev": "true"}, nil, false, "setuid (filesystem.allowSuid)|device nodes (filesystem.allowDev)"},
		{"suid as a mount flag", nil, []string{"suid"}, false, "setuid (filesystem.allowSuid)"},
		{"dev as a context mount option", map[string]string{"filesystem.mountOptions": "[dev]"}, nil, false, "device nodes (filesystem.allowDev)"},
		{"raw block: no filesystem", map[string]string{"filesystem.allowSuid": "true"}, nil, true, ""},
	} {
		r := &Record{VolumeID: "pv", StagingPath: "/k", Block: c.block, MountFlags: c.flags, Context: map[string]string{"loop.file": "/i/pv.img"}}
		for k, v := range c.ctx {
			r.Context[k] = v
		}
		d, err := desired(VolumeName(r.VolumeID), r, opts())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := strings.Join(hostPrivileges(d), "|"); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestCheckSecretKey(t *testing.T) {
	for k, ok := range map[string]bool{
		"iscsi.chap.password": true, "password": true,
		"": false, "../../x": false, "a/b": false, ".hidden": false, "..": false, "a\x00b": false,
	} {
		if got := checkSecretKey(k) == ""; got != ok {
			t.Errorf("checkSecretKey(%q) accepts: %v, want %v", k, got, ok)
		}
	}
}

// A refused key writes nothing, whichever order the map gives.
func TestWriteSecretsAllOrNothing(t *testing.T) {
	rs := records{dir: t.TempDir()}
	secrets := map[string]string{"../x": "v"}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		secrets[k] = "s"
	}
	for range 10 {
		if _, err := rs.writeSecrets("v", secrets); err == nil {
			t.Fatal("a bad key was accepted")
		}
		if _, err := os.Stat(rs.secretDir("v")); !os.IsNotExist(err) {
			t.Fatalf("secrets left after a refusal: %v", err)
		}
	}
}

// encryption.* keys are spec.encryption's, as a manifest's; a stage
// secret "encryption.luks2.key" becomes the first key file.
func TestDesiredEncryption(t *testing.T) {
	r := &Record{VolumeID: "enc", StagingPath: "/s", Context: map[string]string{
		"loop.file":              "/images/enc.img",
		"encryption.luks2.keys":  "[{tpm2: {pcrs: [7]}}]",
		"encryption.luks2.pbkdf": "pbkdf2",
		secretKeyFile:            "/var/lib/volumed/csi/secrets/csi-enc/encryption.luks2.key",
	}}
	d, err := desired("csi-enc", r, opts())
	if err != nil {
		t.Fatal(err)
	}
	e := d.Spec.Encryption
	if e == nil || e.LUKS2 == nil || len(e.LUKS2.Keys) != 2 || e.LUKS2.PBKDF != "pbkdf2" ||
		e.LUKS2.Keys[0].File != r.Context[secretKeyFile] || e.LUKS2.Keys[1].TPM2 == nil || e.LUKS2.Keys[1].TPM2.PCRs[0] != 7 {
		t.Errorf("encryption: %+v", e)
	}
	delete(r.Context, "encryption.luks2.keys")
	if d, err = desired("csi-enc", r, opts()); err != nil || len(d.Spec.Encryption.LUKS2.Keys) != 1 {
		t.Errorf("the secret's key alone: %+v, %v", d.Spec.Encryption, err)
	}
	r.Context["encryption.luks2.cipher"] = "aes-xts-plain64"
	r.Context["encryption.luks2.kyes"] = "[]"
	if _, err = desired("csi-enc", r, opts()); err == nil || !strings.Contains(err.Error(), "spec.encryption.luks2.kyes") {
		t.Errorf("a misspelt encryption field: %v", err)
	}
}

package luks

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/volumed/volumed/drivers/tang/tangtest"
	"github.com/volumed/volumed/internal/testtool"
)

var recoveryShape = regexp.MustCompile(`^([cbdefghijklnrtuv]{8}-){7}[cbdefghijklnrtuv]{8}$`)

func TestRecoveryKeyShape(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		k, err := RecoveryKey()
		if err != nil {
			t.Fatal(err)
		}
		s := string(k.RevealBytes())
		if !recoveryShape.MatchString(s) || seen[s] {
			t.Fatalf("recovery key %q: not systemd's shape, or seen before", s)
		}
		seen[s] = true
	}
}

// A recovery key opens a volume whose only other key is a Tang key
// whose server is down, and systemd-cryptenroll lists its keyslot as a
// recovery key.
func TestRecoveryKeyOpensWhenTangIsDown(t *testing.T) {
	needCryptsetup(t)
	srv := tangtest.Start(t)
	dev := img(t, 32<<20)
	tk := TangKey{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	c := &Client{}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{tk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	rk, err := c.AddRecoveryKey(tctx(t), dev, []Key{tk})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if ok, err := c.CheckKey(tctx(t), dev, tk); ok || err == nil {
		t.Fatalf("the Tang key opens with its server down: %v %v", ok, err)
	}
	typed := filepath.Join(t.TempDir(), "typed")
	if err := os.WriteFile(typed, rk.RevealBytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CheckKey(tctx(t), dev, FileKey{Path: typed}); err != nil || !ok {
		t.Fatalf("the recovery key does not open: %v %v", ok, err)
	}
	enroll := testtool.Need(t, "systemd", "systemd-cryptenroll")[0]
	out, err := exec.Command(enroll, dev).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^\s*1\s+recovery\s*$`).Match(out) {
		t.Fatalf("systemd-cryptenroll %s: %v\n%s\nwant keyslot 1 listed as recovery", dev, err, out)
	}
}

// With no key that opens the header, no keyslot is added.
func TestRecoveryKeyNeedsAKeyThatOpens(t *testing.T) {
	needCryptsetup(t)
	dev := img(t, 32<<20)
	fk, _ := randomKey(t)
	other, _ := randomKey(t)
	c := &Client{}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	before := hashFile(t, dev)
	_, err := c.AddRecoveryKey(tctx(t), dev, []Key{other})
	var le *LockedError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "does not match any keyslot") {
		t.Fatalf("recovery key with a wrong key: %v, want a LockedError", err)
	}
	if hashFile(t, dev) != before {
		t.Fatal("the header changed")
	}
}

package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/tang/tangtest"
	"github.com/volumed/volumed/internal/testtool"
)

var recoveryKeyRE = regexp.MustCompile(`(?m)^\s+((?:[cbdefghijklnrtuv]{8}-){7}[cbdefghijklnrtuv]{8})$`)

// An encrypted volume whose key is bound to a real tangd, under the real
// agent: its header carries Clevis' token; `volumed recovery-key` prints
// a key that opens the header; with the server down the volume is Locked
// waiting for it, and `volumed status` says which server and why. (This
// host has no dm-crypt, so the volume is never mapped here; the OS-image
// tier opens it.)
func TestTangKeyUnderTheAgent(t *testing.T) {
	t.Parallel()
	cryptsetup := testtool.Need(t, "cryptsetup-bin", "cryptsetup")[0]
	srv := tangtest.Start(t)
	e := newEnv(t)
	img := filepath.Join(e.images, "vault.img")
	e.write("vault.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata:
  name: vault
spec:
  source:
    loop:
      file: %s
      create: { size: 64Mi }
  filesystem:
    type: ext4
  encryption:
    luks2:
      pbkdf: pbkdf2
      keys:
        - tang: { url: %q, thumbprint: %q }
`, img, srv.URL, srv.Thumbprint()))
	e.start()
	// The header is whole once its token is in (luksFormat comes
	// first, then the token import).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := exec.Command(cryptsetup, "token", "export", "--token-id", "0", img).CombinedOutput()
		if err == nil {
			if !strings.Contains(string(out), `"type":"clevis"`) {
				t.Fatalf("token 0 of the header: %s, want Clevis' token", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no token 0 on %s after 2 minutes: %v %s", img, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The agent retries its open (which fails here for want of
	// dm-crypt): the recovery key waits for a gap between them.
	var out []byte
	for {
		var err error
		out, err = exec.Command(volumedBin, "recovery-key", "--socket", e.socket, "vault").CombinedOutput()
		if err == nil {
			break
		}
		if !strings.Contains(string(out), "operation running") || time.Now().After(deadline) {
			t.Fatalf("volumed recovery-key: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	m := recoveryKeyRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("volumed recovery-key printed no recovery key:\n%s", out)
	}
	check := exec.Command(cryptsetup, "open", "--test-passphrase", "--key-file=-", img)
	check.Stdin = strings.NewReader(string(m[1]))
	if o, err := check.CombinedOutput(); err != nil {
		t.Fatalf("the printed recovery key does not open the header: %v %s", err, o)
	}
	if strings.Contains(e.logText(), string(m[1])) {
		t.Fatal("the recovery key is in the agent's log")
	}

	srv.Stop()
	e.waitFor("vault locked waiting for its tang server", func(st *api.Status) bool {
		for _, v := range st.Volumes {
			for _, c := range v.Conditions {
				if v.Name == "vault" && c.Reason == "WaitingForKeyServer" && strings.HasPrefix(c.Message, "waiting for tang server "+srv.URL+": ") {
					return true
				}
			}
		}
		return false
	})
	status, err := exec.Command(volumedBin, "status", "--socket", e.socket, "vault").CombinedOutput()
	if err != nil && !strings.Contains(string(status), "waiting for tang server") {
		t.Fatalf("volumed status vault: %v\n%s", err, status)
	}
	if !strings.Contains(string(status), "waiting for tang server "+srv.URL) {
		t.Fatalf("volumed status vault does not say it waits for %s:\n%s", srv.URL, status)
	}
	t.Logf("volumed status vault:\n%s", status)
}

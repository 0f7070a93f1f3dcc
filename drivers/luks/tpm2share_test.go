package luks

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/volumed/volumed/drivers/tpm2"
	"github.com/volumed/volumed/drivers/tpm2/swtpmtest"
	"github.com/volumed/volumed/internal/secret"
	"github.com/volumed/volumed/internal/testtool"
)

// clevisTPM2 runs `clevis ARGS` with Clevis' tpm2 pin talking to the
// software TPM at sock (tpm2-tools' swtpm TCTI).
func clevisTPM2(t *testing.T, sock string, args ...string) ([]byte, error) {
	t.Helper()
	bin := testtool.Need(t, "clevis-tpm2", "clevis", "clevis-encrypt-tpm2", "tpm2_unseal")[0]
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TPM2TOOLS_TCTI=swtpm:path="+sock)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = fmt.Errorf("clevis %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return out, err
}

func extendPCR(t *testing.T, sock string, pcr int) {
	t.Helper()
	tpm, err := tpm2.Open(tctx(t), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	if err := tpm.ExtendPCR(pcr, []byte("another boot")); err != nil {
		t.Fatal(err)
	}
}

// TPM2 and Tang, 2 of 2, bound by volumed: Clevis (its sss pin nesting
// its tpm2 and tang pins) recovers the keyslot's passphrase; volumed
// opens with both, waits for the server while it is down, and is locked
// (not waiting) once the PCR changed, saying so.
func TestThresholdTPM2AndTang(t *testing.T) {
	needCryptsetup(t)
	sock := swtpmtest.Start(t)
	srvs, tks := tangServers(t, 1)
	dev := loopImage(t)
	k := ThresholdKey{N: 2, Keys: []Share{TPM2Key{Device: sock, PCRs: []int{7}}, tks[0]}}
	c := &Client{SysRoot: t.TempDir()}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	_, toks := clevisTokens(t, dev)
	if len(toks) != 1 || len(toks[0].Keyslots) != 1 {
		t.Fatalf("tokens %+v, want one clevis token bound to one keyslot", toks)
	}
	pass, err := clevisTPM2(t, sock, "luks", "pass", "-d", dev, "-s", strconv.Itoa(toks[0].Keyslots[0]))
	if err != nil {
		t.Fatal(err)
	}
	if slot, ok, err := c.slotOf(tctx(t), dev, secret.FromBytes(pass)); err != nil || !ok || slot != toks[0].Keyslots[0] {
		t.Fatalf("what clevis recovered opens slot %d %v %v", slot, ok, err)
	}
	if ok, err := c.CheckKey(tctx(t), dev, k); err != nil || !ok {
		t.Fatalf("tpm2 and tang, both there: %v %v", ok, err)
	}
	srvs[0].Stop()
	ok, err := c.CheckKey(tctx(t), dev, k)
	var we *WaitingError
	if ok || !errors.As(err, &we) || we.Err.URL != tks[0].URL {
		t.Fatalf("tpm2 and tang, the server down: %v %v, want waiting for %s", ok, err, tks[0].URL)
	}
	srvs[0].Resume()
	extendPCR(t, sock, 7)
	ok, err = c.CheckKey(tctx(t), dev, k)
	if ok || err == nil || errors.As(err, &we) || !errors.Is(err, tpm2.ErrPolicy) || !strings.Contains(err.Error(), "sha256 PCRs 7 differ") {
		t.Fatalf("tpm2 and tang, PCR 7 changed: %v %v, want locked naming PCR 7, not waiting", ok, err)
	}
}

// volumed opens what `clevis luks bind ... sss` bound to a TPM2 (sealed
// to sha256 PCR 7) and a Tang server; not with another PCR set.
func TestThresholdOpensClevisTPM2AndTang(t *testing.T) {
	needCryptsetup(t)
	sock := swtpmtest.Start(t)
	_, tks := tangServers(t, 1)
	dev := loopImage(t)
	fk, _ := randomKey(t)
	c := &Client{}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"t":2,"pins":{"tpm2":{"pcr_bank":"sha256","pcr_ids":"7"},"tang":{"url":%q,"thp":%q}}}`, tks[0].URL, tks[0].Thumbprint)
	if _, err := clevisTPM2(t, sock, "luks", "bind", "-y", "-d", dev, "-k", fk.Path, "sss", cfg); err != nil {
		t.Fatal(err)
	}
	k := ThresholdKey{N: 2, Keys: []Share{tks[0], TPM2Key{Device: sock, PCRs: []int{7}}}}
	if ok, err := c.CheckKey(tctx(t), dev, k); err != nil || !ok {
		t.Fatalf("volumed's tpm2 and tang key does not open what clevis bound: %v %v", ok, err)
	}
	other := ThresholdKey{N: 2, Keys: []Share{tks[0], TPM2Key{Device: sock, PCRs: []int{7, 11}}}}
	if ok, err := c.CheckKey(tctx(t), dev, other); ok || err == nil {
		t.Fatalf("a key of PCRs 7+11 matches a binding of PCR 7: %v %v", ok, err)
	}
}

// A threshold in a threshold: the TPM2 and one of two Tang servers.
// Clevis recovers it; volumed opens it with either server down, and
// waits for both when both are.
func TestNestedThreshold(t *testing.T) {
	needCryptsetup(t)
	sock := swtpmtest.Start(t)
	srvs, tks := tangServers(t, 2)
	dev := loopImage(t)
	k := ThresholdKey{N: 2, Keys: []Share{TPM2Key{Device: sock, PCRs: []int{7}}, ThresholdKey{N: 1, Keys: shares(tks)}}}
	c := &Client{SysRoot: t.TempDir()}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	_, toks := clevisTokens(t, dev)
	if len(toks) != 1 {
		t.Fatalf("tokens %+v, want one", toks)
	}
	if _, err := clevisTPM2(t, sock, "luks", "pass", "-d", dev, "-s", strconv.Itoa(toks[0].Keyslots[0])); err != nil {
		t.Fatal(err)
	}
	srvs[0].Stop()
	if ok, err := c.CheckKey(tctx(t), dev, k); err != nil || !ok {
		t.Fatalf("nested, one of two servers down: %v %v", ok, err)
	}
	srvs[1].Stop()
	ok, err := c.CheckKey(tctx(t), dev, k)
	if ok || err == nil || !strings.Contains(err.Error(), "waiting for tang server "+tks[0].URL) || !strings.Contains(err.Error(), "waiting for tang server "+tks[1].URL) {
		t.Fatalf("nested, both servers down: %v %v, want waiting for both", ok, err)
	}
	flat := ThresholdKey{N: 2, Keys: []Share{TPM2Key{Device: sock, PCRs: []int{7}}, tks[0]}}
	if flat.matches(toks[0].JWE) != noMatch || k.matches(toks[0].JWE) != exactMatch {
		t.Fatal("a flat threshold matches a nested binding, or the nested key not its own")
	}
}

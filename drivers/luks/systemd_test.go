package luks

import (
	"context"
	"os/exec"
	"testing"

	"github.com/volumed/volumed/drivers/tpm2/swtpmtest"
	"github.com/volumed/volumed/internal/testtool"
)

// needSystemdTPM2 reports (testtool.Missing) unless systemd's TPM2 tooling is here:
// systemd-cryptenroll and the tpm2-tss libraries it dlopens, with the
// swtpm TCTI. scripts/deps.sh installs them (systemd, and tpm2-tss where
// the Debian release has it under the names it knows), so under make
// test a missing one fails the test.
//
// The other direction (systemd's token plugin unsealing volumed's
// token) is not tested: the plugin finds its TPM only under
// /sys/class/tpmrm, which a software TPM on this host is not.
func needSystemdTPM2(t *testing.T) {
	t.Helper()
	testtool.Need(t, "Debian package systemd", "systemd-cryptenroll")
	testtool.NeedLibraries(t, "systemd-cryptenroll")
}

// volumed opens what systemd sealed: systemd-cryptenroll enrols the TPM,
// and a TPM2Key opens the volume by its token.
func TestVolumedOpensSystemdToken(t *testing.T) {
	needCryptsetup(t)
	needSystemdTPM2(t)
	sock := swtpmtest.Start(t)
	dev := img(t, 32<<20)
	fk, _ := randomKey(t)
	ctx := context.Background()
	c := &Client{}
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	tk := TPM2Key{Device: sock, PCRs: []int{7}}
	if ok, _ := c.CheckKey(ctx, dev, tk); ok {
		t.Fatal("the TPM2 key opens the volume before systemd enrolled it: the test proves nothing")
	}
	cmd := exec.Command("systemd-cryptenroll", "--unlock-key-file="+fk.Path, "--tpm2-device=swtpm:path="+sock, "--tpm2-pcrs=7", dev)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("systemd-cryptenroll: %v\n%s", err, out)
	}
	if ok, err := c.CheckKey(ctx, dev, tk); err != nil || !ok {
		t.Fatalf("volumed does not open systemd's token: %v %v", ok, err)
	}
	// And a Format rerun with the TPM2 key treats systemd's token as the
	// key's enrolment: nothing is added.
	before := hashFile(t, dev)
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk, tk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	if hashFile(t, dev) != before {
		t.Error("Format enrolled the TPM2 key again over systemd's enrolment")
	}
}

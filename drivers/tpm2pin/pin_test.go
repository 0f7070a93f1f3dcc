package tpm2pin

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/drivers/tpm2"
	"github.com/volumed/volumed/drivers/tpm2/swtpmtest"
	"github.com/volumed/volumed/internal/testtool"
)

func openTPM(t *testing.T, sock string) *tpm2.TPM {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	tpm, err := tpm2.Open(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	return tpm
}

// clevis runs `clevis ARGS` against the software TPM (tpm2-tools' swtpm
// TCTI), stdin in, and returns its output. swtpm serves one client at a
// time: the test's own connection is closed while Clevis runs.
func clevis(t *testing.T, sock string, in []byte, args ...string) ([]byte, error) {
	t.Helper()
	bin := testtool.Need(t, "clevis-tpm2", "clevis", "clevis-encrypt-tpm2", "tpm2_unseal")[0]
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TPM2TOOLS_TCTI=swtpm:path="+sock)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(err.Error() + ": " + stderr.String())
	}
	return out, nil
}

// Both ways with Clevis 19 and tpm2-tools 5.4 (Debian 12) on one TPM:
// `clevis decrypt` opens what Bind sealed; Parse and Recover open what
// `clevis encrypt tpm2` sealed; neither opens once a PCR of the policy
// changed.
func TestClevisBothWays(t *testing.T) {
	sock := swtpmtest.Start(t)
	plain := []byte("the passphrase of a keyslot")
	tpm := openTPM(t, sock)
	ours, err := Bind(tpm, []int{7, 11}, plain)
	tpm.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := clevis(t, sock, []byte(ours), "decrypt"); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("clevis decrypt of volumed's binding: %q %v", got, err)
	}
	theirs, err := clevis(t, sock, plain, "encrypt", "tpm2", `{"pcr_bank":"sha256","pcr_ids":"7,11"}`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(string(theirs))
	if err != nil {
		t.Fatalf("Parse of clevis encrypt tpm2: %v", err)
	}
	if !slices.Equal(b.PCRs, []int{7, 11}) {
		t.Errorf("PCRs %v, want [7 11]", b.PCRs)
	}
	tpm = openTPM(t, sock)
	got, err := b.Recover(tpm)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Recover of clevis' binding: %q %v", got, err)
	}
	if err := tpm.ExtendPCR(11, []byte("another boot")); err != nil {
		t.Fatal(err)
	}
	ob, err := Parse(ours)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]Binding{"volumed's": ob, "clevis'": b} {
		if _, err := b.Recover(tpm); !errors.Is(err, tpm2.ErrPolicy) {
			t.Errorf("Recover of %s binding with PCR 11 extended: %v, want ErrPolicy", name, err)
		}
	}
	tpm.Close()
	if got, err := clevis(t, sock, []byte(ours), "decrypt"); err == nil {
		t.Errorf("clevis decrypt with PCR 11 extended recovered %d bytes", len(got))
	}
}

func header(js string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(js)) + "..iv.ct.tag"
}

// What Parse refuses, and that it says why: another pin is ErrNotTPM2,
// a tpm2 binding this package cannot unseal names what it lacks.
func TestParseRefuses(t *testing.T) {
	if _, err := Parse(header(`{"alg":"dir","enc":"A256GCM","clevis":{"pin":"tang","tang":{}}}`)); !errors.Is(err, ErrNotTPM2) {
		t.Errorf("a tang JWE: %v, want ErrNotTPM2", err)
	}
	blob := base64.RawURLEncoding.EncodeToString([]byte{0, 5, 9})
	tpm2Hdr := func(f string) string {
		return header(`{"alg":"dir","enc":"A256GCM","clevis":{"pin":"tpm2","tpm2":{` + f + `}}}`)
	}
	for _, c := range []struct{ in, want string }{
		{"", "not in compact serialization"},
		{"!!.a.b.c.d", "protected header"},
		{header(`[]`), "protected header"},
		{tpm2Hdr(`"hash":"sha1","key":"ecc","pcr_bank":"sha256","pcr_ids":"7"`), `hash "sha1"`},
		{tpm2Hdr(`"hash":"sha256","key":"rsa","pcr_bank":"sha256","pcr_ids":"7"`), `key "rsa"`},
		{tpm2Hdr(`"hash":"sha256","key":"ecc"`), "no pcr_ids"},
		{tpm2Hdr(`"hash":"sha256","key":"ecc","pcr_ids":"7"`), `pcr_bank ""`},
		{tpm2Hdr(`"hash":"sha256","key":"ecc","pcr_bank":"sha1","pcr_ids":"7"`), `pcr_bank "sha1"`},
		{tpm2Hdr(`"hash":"sha256","key":"ecc","pcr_bank":"sha256","pcr_ids":"7,x"`), "pcr_ids"},
		{tpm2Hdr(`"hash":"sha256","key":"ecc","pcr_bank":"sha256","pcr_ids":"24"`), "PCR 24"},
		{tpm2Hdr(`"hash":"sha256","key":"ecc","pcr_bank":"sha256","pcr_ids":"7,7"`), "twice"},
		{tpm2Hdr(`"hash":"sha256","key":"ecc","pcr_bank":"sha256","pcr_ids":"7","jwk_pub":"` + blob + `","jwk_priv":"` + blob + `"`), "jwk_priv and jwk_pub"},
	} {
		_, err := Parse(c.in)
		if err == nil || errors.Is(err, ErrNotTPM2) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%.60q) = %v, want an error with %q", c.in, err, c.want)
		}
	}
}

func TestParseIDs(t *testing.T) {
	for in, want := range map[string][]int{"7": {7}, "11,7": {7, 11}, "0, 23": {0, 23}} {
		if got, err := ParseIDs(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseIDs(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", "7,", "-1", "1,1", "a"} {
		if got, err := ParseIDs(in); err == nil {
			t.Errorf("ParseIDs(%q) = %v, want an error", in, got)
		}
	}
}

// A fake TPM that seals by keeping the secret: the JWE round trip and
// what Recover makes of what the TPM hands back, without a TPM.
type fakeTPM struct{ sealed []byte }

func (f *fakeTPM) Seal(secret []byte, pcrs []int) (tpm2.Sealed, error) {
	f.sealed = bytes.Clone(secret)
	part := func(b byte) []byte { return []byte{0, 2, b, b} }
	return tpm2.Sealed{Blob: append(part(1), part(2)...), PCRs: slices.Sorted(slices.Values(pcrs))}, nil
}

func (f *fakeTPM) Unseal(tpm2.Sealed) ([]byte, error) { return f.sealed, nil }

func TestBindRecoverRoundTrip(t *testing.T) {
	f := &fakeTPM{}
	jwe, err := Bind(f, []int{11, 7}, []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(jwe, "secret") || bytes.Contains(f.sealed, []byte("secret")) {
		t.Fatal("the plaintext is in the JWE or the sealed key")
	}
	b, err := Parse(jwe)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.PCRs, []int{7, 11}) || !bytes.Equal(b.Sealed.Blob, []byte{0, 2, 1, 1, 0, 2, 2, 2}) {
		t.Fatalf("parsed PCRs %v blob %x", b.PCRs, b.Sealed.Blob)
	}
	// Clevis' sealed JWK ends with a newline.
	f.sealed = append(f.sealed, '\n')
	if got, err := b.Recover(f); err != nil || string(got) != "secret" {
		t.Fatalf("Recover: %q %v", got, err)
	}
	for _, bad := range []string{`{"kty":"EC"}`, `{"kty":"oct","k":"AAAA"}`, `not json`} {
		f.sealed = []byte(bad)
		if _, err := b.Recover(f); err == nil || strings.Contains(err.Error(), bad) {
			t.Errorf("Recover with the TPM handing back %s: %v, want an error that does not echo it", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	fk := &fakeTPM{}
	jwe, err := Bind(fk, []int{7}, []byte("x"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(jwe)
	f.Add(header(`{"clevis":{"pin":"tpm2","tpm2":{"hash":"sha256","key":"ecc","pcr_bank":"sha256","pcr_ids":"7"}}}`))
	f.Fuzz(func(t *testing.T, in string) {
		b, err := Parse(in)
		if err != nil {
			return
		}
		if b.jwe == nil || tpm2.CheckPCRs(b.PCRs) != nil || tpm2.CheckBlob(b.Sealed.Blob) != nil || !slices.IsSorted(b.PCRs) {
			t.Fatalf("Parse(%q) accepted a binding it cannot recover: %+v", in, b)
		}
	})
}

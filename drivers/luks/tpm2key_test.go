package luks

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/drivers/tpm2"
	"github.com/volumed/volumed/drivers/tpm2/swtpmtest"
	"github.com/volumed/volumed/internal/secret"
)

// tpm2Tokens returns the header's systemd-tpm2 tokens, parsed.
func tpm2Tokens(t *testing.T, dev string) (Header, []TPM2Token) {
	return tokensOf(t, dev, TokenTPM2, ParseTPM2Token)
}

// tokensOf returns the whole header of dev and its tokens of type typ,
// each parsed by parse.
func tokensOf[T any](t *testing.T, dev, typ string, parse func([]byte) (T, error)) (Header, []T) {
	t.Helper()
	in, err := InspectDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := in.Best()
	if !ok {
		t.Fatalf("no whole header: %+v", in.Copies)
	}
	var out []T
	for _, tok := range h.TokenObjects {
		if tok.Type != typ {
			continue
		}
		v, err := parse(tok.JSON)
		if err != nil {
			t.Fatalf("token %d: %v", tok.ID, err)
		}
		out = append(out, v)
	}
	return h, out
}

func extend(t *testing.T, sock string, pcr int) {
	t.Helper()
	tpm, err := tpm2.Open(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	if err := tpm.ExtendPCR(pcr, []byte("another boot chain")); err != nil {
		t.Fatal(err)
	}
}

// unsealed is what the TPM unseals from the header's one token, as the
// passphrase systemd would enrol.
func unsealed(t *testing.T, sock, dev string) []byte {
	t.Helper()
	_, toks := tpm2Tokens(t, dev)
	if len(toks) != 1 {
		t.Fatalf("%d systemd-tpm2 tokens, want 1", len(toks))
	}
	tpm, err := tpm2.Open(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	s, err := tpm.Unseal(toks[0].Sealed)
	if err != nil {
		t.Fatal(err)
	}
	return tpm2Passphrase(s)
}

func TestTPM2FormatAndCheck(t *testing.T) {
	needCryptsetup(t)
	sock := swtpmtest.Start(t)
	ctx := context.Background()
	dev := img(t, 32<<20)
	tk := TPM2Key{Device: sock, PCRs: []int{7}}
	fk, fb := randomKey(t)
	w := &procWatch{}
	c := &Client{}
	w.watch(t, c)
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{tk, fk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	h, toks := tpm2Tokens(t, dev)
	if h.Keyslots != 2 || len(toks) != 1 || len(toks[0].Keyslots) != 1 || !slices.Equal(toks[0].Sealed.PCRs, []int{7}) {
		t.Fatalf("after format: %d keyslots, tokens %+v; want 2 keyslots and one token for PCR 7 bound to one", h.Keyslots, toks)
	}
	pass := unsealed(t, sock, dev)
	w.check(t, fb, pass)
	// The file key took the first keyslot; the TPM's passphrase opens
	// the token's keyslot, with systemd's KDF for random keys.
	out, err := exec.Command("cryptsetup", "luksDump", dev).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "Hash:       sha512") || !strings.Contains(string(out), "Iterations: 1000") {
		t.Errorf("the TPM2 keyslot is not pbkdf2-sha512 with 1000 iterations:\n%s", out)
	}
	if slot, ok, err := c.slotOf(ctx, dev, secret.FromBytes(pass)); err != nil || !ok || slot != toks[0].Keyslots[0] {
		t.Errorf("the unsealed passphrase opens slot %d (%v %v), want the token's %v", slot, ok, err, toks[0].Keyslots)
	}
	for _, k := range []Key{tk, fk} {
		if ok, err := c.CheckKey(ctx, dev, k); err != nil || !ok {
			t.Errorf("%s does not open the volume: %v %v", k.Describe(), ok, err)
		}
	}
	// Run again (a restart after the intent finished): nothing changes.
	before := hashFile(t, dev)
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{tk, fk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	if hashFile(t, dev) != before {
		t.Error("a second Format of a finished intent changed the header")
	}

	extend(t, sock, 7)
	_, err = c.CheckKey(ctx, dev, tk)
	if err == nil || !strings.Contains(err.Error(), "tpm2: PCR 7 differs from the sealed policy") {
		t.Errorf("check after PCR 7 changed: %v, want it to say PCR 7 differs", err)
	}
	if ok, err := c.CheckKey(ctx, dev, fk); err != nil || !ok {
		t.Errorf("the key file no longer opens: %v %v", ok, err)
	}
	// Another TPM (the disk moved to another machine) cannot open it.
	other := TPM2Key{Device: swtpmtest.Start(t), PCRs: []int{7}}
	if ok, err := c.CheckKey(ctx, dev, other); ok || err == nil {
		t.Errorf("another TPM opens the volume: %v %v", ok, err)
	}
}

func TestTPM2OnlyFormatAndLockedReason(t *testing.T) {
	needCryptsetup(t)
	sock := swtpmtest.Start(t)
	ctx := context.Background()
	dev := img(t, 32<<20)
	tk := TPM2Key{Device: sock, PCRs: []int{7, 11}}
	c := &Client{SysRoot: t.TempDir()}
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{tk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	h, toks := tpm2Tokens(t, dev)
	if h.Keyslots != 1 || len(toks) != 1 || !slices.Equal(toks[0].Keyslots, []int{0}) {
		t.Fatalf("TPM2-only format: %d keyslots, tokens %+v; want the token bound to keyslot 0", h.Keyslots, toks)
	}
	if ok, err := c.CheckKey(ctx, dev, tk); err != nil || !ok {
		t.Fatalf("the TPM2 key does not open its volume: %v %v", ok, err)
	}
	extend(t, sock, 11)
	fk, _ := randomKey(t)
	useNoDMCryptsetup(t, c)
	_, err := c.Open(ctx, OpenOptions{Device: dev, Name: "volumed-t", UUID: testUUID, Keys: []Key{tk, fk}})
	var le *LockedError
	if !errors.As(err, &le) || len(le.Failures) != 2 {
		t.Fatalf("open after PCR 11 changed: %v, want a LockedError with two reasons", err)
	}
	if r := le.Failures[0].Reason; !strings.HasPrefix(r, "tpm2: PCR 11 differs from the sealed policy") {
		t.Errorf("the TPM2 key's reason is %q, want it to name PCR 11", r)
	}
	if !strings.Contains(err.Error(), "systemd-tpm2") {
		t.Errorf("the locked error %q does not mention the header's token", err)
	}
}

// useNoDMCryptsetup stands in for cryptsetup open where the kernel has
// no device-mapper: it checks the key and maps nothing.
func useNoDMCryptsetup(t *testing.T, c *Client) {
	t.Helper()
	if _, err := os.Stat("/sys/class/misc/device-mapper"); err == nil {
		return
	}
	c.Cryptsetup = filepath.Join(t.TempDir(), "cryptsetup-nodm")
	script := "#!/bin/sh\n[ \"$1\" = open ] || exec cryptsetup \"$@\"\nshift\n" +
		"exec cryptsetup open --test-passphrase \"$@\"\n"
	if err := os.WriteFile(c.Cryptsetup, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestTPM2FormatRefusesBeforeTouchingTheDevice(t *testing.T) {
	needCryptsetup(t)
	sock := swtpmtest.Start(t)
	ctx := context.Background()
	fk, _ := randomKey(t)
	for _, k := range []TPM2Key{
		{Device: sock, PCRs: []int{7, 24}},
		{Device: sock},
		{Device: filepath.Join(t.TempDir(), "no-tpm"), PCRs: []int{7}},
	} {
		dev := img(t, 32<<20)
		before := hashFile(t, dev)
		err := (&Client{}).Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk, k}, PBKDF: fast})
		if err == nil || !strings.Contains(err.Error(), "key 1 (tpm2") {
			t.Errorf("format with %+v: %v, want an error naming key 1", k, err)
		}
		if hashFile(t, dev) != before {
			t.Errorf("format with %+v wrote the device before failing", k)
		}
	}
}

// importUnbound seals a new secret for k and imports its token bound to
// no keyslot, as enrolTPM2's first step does; it returns the passphrase.
func importUnbound(t *testing.T, c *Client, dev string, k TPM2Key) secret.Value {
	t.Helper()
	tpm, err := k.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	sealed, pass, err := seal(tpm, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.importToken(context.Background(), dev, 0, TPM2Token{Sealed: sealed}, false); err != nil {
		t.Fatal(err)
	}
	return pass
}

// Each test below leaves the header as a crash at one point of a TPM2
// enrolment would, and checks that the next Format converges: the key
// opens, the token is bound to the keyslot its passphrase opens, and no
// keyslot or token is left over.
func TestTPM2EnrolConverges(t *testing.T) {
	needCryptsetup(t)
	sock := swtpmtest.Start(t)
	ctx := context.Background()
	tk := TPM2Key{Device: sock, PCRs: []int{7}}
	cases := []struct {
		name      string
		fileFirst bool
		// crash leaves the header as the crash did
		crash func(t *testing.T, c *Client, dev string, opener secret.Value)
	}{
		{"TPM2-only, crash between luksFormat and the token import", false,
			func(t *testing.T, c *Client, dev string, _ secret.Value) {
				if out, err := exec.Command("cryptsetup", "token", "remove", "--token-id", "0", dev).CombinedOutput(); err != nil {
					t.Fatalf("%v %s", err, out)
				}
			}},
		{"token imported, no keyslot yet", true,
			func(t *testing.T, c *Client, dev string, _ secret.Value) { importUnbound(t, c, dev, tk) }},
		{"token imported and keyslot added, not bound", true,
			func(t *testing.T, c *Client, dev string, opener secret.Value) {
				pass := importUnbound(t, c, dev, tk)
				args := append([]string{"luksAddKey", "--batch-mode"}, fast.args()...)
				args = append(args, "--key-file=/proc/self/fd/3", "--new-keyfile=/proc/self/fd/4", "--", dev)
				if _, err := c.run(ctx, args, opener, pass); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dev := img(t, 32<<20)
			c := &Client{}
			keys := []Key{tk}
			fk, fb := randomKey(t)
			if tc.fileFirst {
				keys = []Key{fk, tk}
				if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk}, PBKDF: fast}); err != nil {
					t.Fatal(err)
				}
				tc.crash(t, c, dev, secret.FromBytes(fb))
			} else {
				if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: keys, PBKDF: fast}); err != nil {
					t.Fatal(err)
				}
				tc.crash(t, c, dev, secret.Value{})
				if ok, _ := c.CheckKey(ctx, dev, tk); ok {
					t.Fatal("the crash left a header the TPM2 key opens: the case tests nothing")
				}
			}
			if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: keys, PBKDF: fast}); err != nil {
				t.Fatalf("Format after the crash: %v", err)
			}
			h, toks := tpm2Tokens(t, dev)
			if h.Keyslots != len(keys) || len(toks) != 1 || len(toks[0].Keyslots) != 1 {
				t.Fatalf("after the rerun: %d keyslots, tokens %+v; want %d keyslots and one bound token", h.Keyslots, toks, len(keys))
			}
			slot, ok, err := c.slotOf(ctx, dev, secret.FromBytes(unsealed(t, sock, dev)))
			if err != nil || !ok || slot != toks[0].Keyslots[0] {
				t.Errorf("the token's passphrase opens slot %d (%v %v), the token names %v", slot, ok, err, toks[0].Keyslots)
			}
			for _, k := range keys {
				if ok, err := c.CheckKey(ctx, dev, k); err != nil || !ok {
					t.Errorf("%s does not open: %v %v", k.Describe(), ok, err)
				}
			}
		})
	}
}

func TestTPM2TokenJSON(t *testing.T) {
	s := tpm2.Sealed{
		Blob:       append([]byte{0, 3, 1, 2, 3}, 0, 2, 4, 5),
		PCRs:       []int{0, 7},
		PolicyHash: bytes.Repeat([]byte{0xab}, 32),
		PCRValues:  map[int][]byte{7: bytes.Repeat([]byte{1}, 32)},
	}
	js, err := TPM2Token{Keyslots: []int{1}, Sealed: s}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"type":"systemd-tpm2"`, `"keyslots":["1"]`, `"tpm2-blob":"AAMBAgMAAgQF"`, `"tpm2-pcrs":[0,7]`,
		`"tpm2-pcr-bank":"sha256"`, `"tpm2-primary-alg":"ecc"`, `"tpm2-policy-hash":"abab`, `"tpm2-pin":false`} {
		if !strings.Contains(string(js), field) {
			t.Errorf("token JSON lacks %s: %s", field, js)
		}
	}
	back, err := ParseTPM2Token(js)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Keyslots, []int{1}) || !bytes.Equal(back.Sealed.Blob, s.Blob) || !slices.Equal(back.Sealed.PCRs, s.PCRs) ||
		!bytes.Equal(back.Sealed.PolicyHash, s.PolicyHash) || !bytes.Equal(back.Sealed.PCRValues[7], s.PCRValues[7]) {
		t.Errorf("round trip: %+v, want %+v", back, s)
	}
	unbound, _ := TPM2Token{Sealed: s}.MarshalJSON()
	if !strings.Contains(string(unbound), `"keyslots":[]`) {
		t.Errorf("an unbound token must carry an empty keyslots list (cryptsetup needs it): %s", unbound)
	}
	// systemd's own token (no volumed_pcr_values) parses.
	sd := `{"type":"systemd-tpm2","keyslots":["0"],"tpm2-blob":"AAMBAgMAAgQF","tpm2-pcrs":[7],"tpm2-pcr-bank":"sha256",` +
		`"tpm2-primary-alg":"ecc","tpm2-policy-hash":"` + strings.Repeat("ab", 32) + `","tpm2-pin":false}`
	if _, err := ParseTPM2Token([]byte(sd)); err != nil {
		t.Errorf("systemd's token: %v", err)
	}
	for _, bad := range []struct{ edit, want string }{
		{`"tpm2-pin":true`, "PIN"},
		{`"tpm2-pcr-bank":"sha1"`, "sha1"},
		{`"tpm2-primary-alg":"rsa"`, "rsa"},
		{`"tpm2-pcrs":[24]`, "PCR 24"},
		{`"tpm2-pcrs":[]`, "no PCRs"},
		{`"keyslots":["x"]`, "keyslot"},
		{`"tpm2-blob":"AA=="`, "tpm2-blob"},
		{`"tpm2-policy-hash":"zz"`, "policy-hash"},
		{`"type":"luks2-keyring"`, "type"},
	} {
		key := bad.edit[:strings.Index(bad.edit, ":")]
		i := strings.Index(sd, key)
		j := i + strings.IndexAny(sd[i:], ",}")
		if strings.HasPrefix(sd[i+len(key)+1:], "[") {
			j = i + strings.Index(sd[i:], "]") + 1
		}
		js := sd[:i] + bad.edit + sd[j:]
		if _, err := ParseTPM2Token([]byte(js)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error naming %q", js, err, bad.want)
		}
	}
	if _, err := ParseTPM2Token([]byte(strings.Replace(sd, `"tpm2-pin":false`, `"tpm2-pin":false,"tpm2_srk":"AA=="`, 1))); err == nil {
		t.Error("a token sealed under a persistent SRK parsed")
	}
}

func FuzzTPM2Token(f *testing.F) {
	js, _ := TPM2Token{Keyslots: []int{1}, Sealed: tpm2.Sealed{Blob: []byte{0, 1, 9, 0, 1, 8}, PCRs: []int{7},
		PolicyHash: make([]byte, 32), PCRValues: map[int][]byte{7: make([]byte, 32)}}}.MarshalJSON()
	f.Add(js)
	f.Add([]byte(`{"type":"systemd-tpm2","keyslots":["0"],"tpm2-blob":"AA==","tpm2-pcrs":[7],"tpm2-policy-hash":"00","tpm2-pin":false}`))
	f.Add([]byte(`{"type":"systemd-tpm2","keyslots":[],"tpm2-pcrs":[99,-1],"volumed_pcr_values":{"x":"y"}}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		tok, err := ParseTPM2Token(js)
		if err != nil {
			return
		}
		if tpm2.CheckPCRs(tok.Sealed.PCRs) != nil || tpm2.CheckBlob(tok.Sealed.Blob) != nil {
			t.Fatalf("accepted a token with bad PCRs or blob: %+v", tok)
		}
		again, err := tok.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseTPM2Token(again)
		if err != nil || !bytes.Equal(back.Sealed.Blob, tok.Sealed.Blob) || !slices.Equal(back.Keyslots, tok.Keyslots) ||
			!slices.Equal(back.Sealed.PCRs, tok.Sealed.PCRs) || !bytes.Equal(back.Sealed.PolicyHash, tok.Sealed.PolicyHash) {
			t.Fatalf("a parsed token does not survive its own JSON: %v", err)
		}
	})
}

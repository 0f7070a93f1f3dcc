package tang

import (
	"encoding/base64"
	"errors"
	"os"
	"strings"
	"testing"
)

// testdata/clevis-tang.jwe is `clevis encrypt tang` (clevis 19, tang 11,
// Debian 12) of "the passphrase" against a server whose signing key's
// thumbprint is clevisSig and exchange key's clevisExch.
const (
	clevisSig  = "SWFqAED-vqRo5h4ANhbxbOOI3EUH0UgOp7hCQpowndU"
	clevisExch = "_4tPwHzeL5I5IBmx_YHITozqZdn59NqbLI-lCDAN47Q"
)

func clevisJWE(t testing.TB) string {
	b, err := os.ReadFile("testdata/clevis-tang.jwe")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestParseClevisBinding(t *testing.T) {
	b, err := ParseBinding(clevisJWE(t))
	if err != nil {
		t.Fatal(err)
	}
	if b.URL != "http://127.0.0.1:18766" || b.KID != clevisExch || !b.PinnedBy(clevisSig) || b.PinnedBy(clevisExch) {
		t.Fatalf("binding %q kid %q; pinned by the signing key %v, by the exchange key %v", b.URL, b.KID, b.PinnedBy(clevisSig), b.PinnedBy(clevisExch))
	}
}

// A JWE of another pin is ErrNotTang; a broken one is an error, never a
// panic.
func TestParseBindingRefuses(t *testing.T) {
	hdr := func(js string) string { return base64.RawURLEncoding.EncodeToString([]byte(js)) + "..iv.ct.tag" }
	if _, err := ParseBinding(hdr(`{"alg":"dir","enc":"A256GCM","clevis":{"pin":"sss","sss":{}}}`)); !errors.Is(err, ErrNotTang) {
		t.Errorf("an sss JWE: %v, want ErrNotTang", err)
	}
	for _, in := range []string{"", "abc", hdr(`{`), hdr(`{"alg":"RSA-OAEP","enc":"A256GCM","clevis":{"pin":"tang","tang":{}}}`),
		hdr(`{"alg":"ECDH-ES","enc":"A256GCM","clevis":{"pin":"tang","tang":{"adv":{"keys":[]}}},"epk":{}}`)} {
		if _, err := ParseBinding(in); err == nil || errors.Is(err, ErrNotTang) {
			t.Errorf("ParseBinding(%q) = %v, want an error saying what is wrong", in, err)
		}
	}
}

func FuzzParseBinding(f *testing.F) {
	f.Add(clevisJWE(f))
	f.Add("e30.a.b.c.d")
	f.Fuzz(func(t *testing.T, in string) {
		b, err := ParseBinding(in)
		if err != nil {
			return
		}
		if b.jwe == nil || b.exchange == nil || b.epk == nil {
			t.Fatalf("a parsed binding lacks what recovery needs: %+v", b)
		}
		b.PinnedBy(clevisSig)
	})
}

// testdata/adv.jws is that server's GET /adv.
func TestVerifyAdvertisement(t *testing.T) {
	adv, err := os.ReadFile("testdata/adv.jws")
	if err != nil {
		t.Fatal(err)
	}
	a, err := VerifyAdvertisement("http://t", clevisSig, adv)
	if err != nil || a.KID != clevisExch {
		t.Fatalf("advertisement: kid %q, %v; want %s", a.KID, err, clevisExch)
	}
	var ke *KeyChangedError
	if _, err := VerifyAdvertisement("http://t", clevisExch, adv); !errors.As(err, &ke) || !strings.Contains(err.Error(), clevisSig) {
		t.Fatalf("pinned to the exchange key: %v, want a KeyChangedError naming %s", err, clevisSig)
	}
	// The payload of one server under another's signature.
	forged := strings.Replace(string(adv), `"payload": "`, `"payload": "e30`, 1)
	if _, err := VerifyAdvertisement("http://t", clevisSig, []byte(forged)); err == nil {
		t.Fatal("an advertisement whose payload was changed verifies")
	}
}

func FuzzVerifyAdvertisement(f *testing.F) {
	adv, err := os.ReadFile("testdata/adv.jws")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(adv)
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := VerifyAdvertisement("http://t", clevisSig, in)
		if err == nil && a.KID == "" {
			t.Fatal("a verified advertisement with no exchange key")
		}
	})
}

package jweheader

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"dir","clevis":{"pin":"tpm2"}}`))
	var h struct {
		Alg    string `json:"alg"`
		Clevis struct {
			Pin string `json:"pin"`
		} `json:"clevis"`
	}
	if err := Decode(hdr+"..iv.ct.tag", &h); err != nil || h.Alg != "dir" || h.Clevis.Pin != "tpm2" {
		t.Fatalf("Decode = %+v, %v", h, err)
	}
	for in, want := range map[string]string{
		"no-dots":  "not in compact serialization",
		"!!!.x":    "JWE protected header",
		"bnVsbA.x": "", // "null" decodes to nothing, no error
		base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".x": "JWE protected header",
	} {
		err := Decode(in, &h)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("Decode(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

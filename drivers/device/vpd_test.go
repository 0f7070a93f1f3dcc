package device

import (
	"encoding/hex"
	"slices"
	"strings"
	"testing"
)

func TestParseVPD83(t *testing.T) {
	eui8 := []byte{0x00, 0x25, 0x38, 0x8b, 0x91, 0xb2, 0xc3, 0xd4}
	eui16 := []byte{0x64, 0x79, 0xa7, 0x4e, 0x2a, 0x00, 0x01, 0x23, 0x00, 0x25, 0x38, 0x41, 0x00, 0x00, 0x00, 0x02}
	naa8 := []byte{0x50, 0x00, 0xc5, 0x00, 0xa1, 0xb2, 0xc3, 0xd4}
	page := vpd83(
		desc(codeASCII, 0, desigT10, []byte("LIO-ORG block0  ")),
		desc(codeUTF8, 0, desigName, []byte("naa.6001405ABCDEF0\x00\x00")),
		desc(codeBinary, 0, desigEUI, eui8),
		desc(codeBinary, 0, desigEUI, eui16),
		desc(codeBinary, 2, desigNAA, []byte{0x60, 0, 0, 0, 0, 0, 0, 1}), // target device
		desc(codeASCII, 0, desigNAA, naa8),                               // wrong code set for NAA
		desc(codeBinary, 0, 0x4, []byte{0, 0, 0, 1}),                     // relative target port
		desc(codeBinary, 0, desigNAA, naa8),
	)
	got, err := parseVPD83([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	want := []wwn{
		{"naa", hex.EncodeToString(naa8)},
		{"eui", hex.EncodeToString(eui16)},
		{"eui", hex.EncodeToString(eui8)},
		{"naa", "6001405abcdef0"},
		{"t10", "lio-org block0"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseVPD83 = %v, want %v", got, want)
	}

	for name, c := range map[string]struct{ page, err string }{
		"empty":         {"", "shorter than its header"},
		"wrong page":    {vpd80("X"), "page code is 0x80, want 0x83"},
		"long length":   {"\x00\x83\x01\x00", "claims 256 bytes, has 0"},
		"stray bytes":   {"\x00\x83\x00\x02\x01\x03", "2 stray bytes at offset 4"},
		"overrun desig": {"\x00\x83\x00\x06\x01\x03\x00\x08\xaa\xbb", "designator at offset 4 claims 8 bytes, has 2"},
	} {
		if _, err := parseVPD83([]byte(c.page)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: err = %v, want %q", name, err, c.err)
		}
	}
}

func TestParseVPD80(t *testing.T) {
	for page, want := range map[string]string{
		vpd80("  WD-WCC4N1234567"):        "WD-WCC4N1234567",
		vpd80("QM00001\x00\x00\x00"):      "QM00001",
		vpd80(""):                         "",
		vpd80("ABC") + "trailing ignored": "ABC",
	} {
		got, err := parseVPD80([]byte(page))
		if err != nil || got != want {
			t.Errorf("parseVPD80(%q) = %q, %v; want %q", page, got, err, want)
		}
	}
	for _, page := range []string{"", "\x00\x80\x00", "\x00\x83\x00\x00", "\x00\x80\x00\x05abc"} {
		if s, err := parseVPD80([]byte(page)); err == nil {
			t.Errorf("parseVPD80(%q) = %q, want an error", page, s)
		}
	}
}

// FuzzVPD feeds arbitrary bytes to both page parsers: they must never
// panic or read out of bounds, and what they return must be usable as an
// identifier.
func FuzzVPD(f *testing.F) {
	f.Add([]byte(vpd80("  WD-WCC4N1234567")))
	f.Add([]byte(scsiDisk("S")["device/vpd_pg83"]))
	f.Add([]byte(vpd83(desc(codeUTF8, 0, desigName, []byte("iqn.2003-01.org.linux-iscsi:t1,t,0x1")))))
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := parseVPD80(b); err == nil && s != trimID(s) {
			t.Fatalf("serial %q keeps its padding", s)
		}
		ws, err := parseVPD83(b)
		if err != nil {
			if ws != nil {
				t.Fatalf("error %v with designators %v", err, ws)
			}
			return
		}
		for i, w := range ws {
			// A designator read from a device must select that device when
			// a user writes it back in a manifest.
			if w.id == "" || w != parseWWN(w.String()) || !w.matches(parseWWN(upperASCII(w.String()))) {
				t.Fatalf("designator %#v does not survive its own spelling", w)
			}
			if slices.Contains(ws[:i], w) {
				t.Fatalf("designator %v listed twice in %v", w, ws)
			}
		}
	})
}

func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

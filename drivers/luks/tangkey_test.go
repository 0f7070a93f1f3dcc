package luks

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/drivers/tang/tangtest"
	"github.com/volumed/volumed/internal/secret"
	"github.com/volumed/volumed/internal/testtool"
)

func tctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

// clevisTokens returns the header's clevis tokens, parsed.
func clevisTokens(t *testing.T, dev string) (Header, []ClevisToken) {
	return tokensOf(t, dev, TokenClevis, ParseClevisToken)
}

// loopImage is an image file attached to a loop device, as a disk.
func loopImage(t *testing.T) string {
	t.Helper()
	testtool.Need(t, "mount", "losetup")
	return testtool.Losetup(t, img(t, 32<<20))
}

// A volume whose only key is a Tang key is formatted with the key's
// token bound to keyslot 0, and opens with it.
func TestTangFormatAndOpen(t *testing.T) {
	needCryptsetup(t)
	srv := tangtest.Start(t)
	dev := loopImage(t)
	tk := TangKey{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	c := &Client{SysRoot: t.TempDir()}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{tk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	h, toks := clevisTokens(t, dev)
	if h.Keyslots != 1 || len(toks) != 1 || !slices.Equal(toks[0].Keyslots, []int{0}) {
		t.Fatalf("Tang-only format: %d keyslots, tokens %+v; want a clevis token bound to keyslot 0", h.Keyslots, toks)
	}
	if ok, err := c.CheckKey(tctx(t), dev, tk); err != nil || !ok {
		t.Fatalf("the Tang key does not open its volume: %v %v", ok, err)
	}
	useNoDMCryptsetup(t, c)
	o, err := c.Open(tctx(t), OpenOptions{Device: dev, Name: "volumed-t", UUID: testUUID, Keys: []Key{tk}})
	if err != nil && !strings.Contains(err.Error(), "not in sysfs") {
		t.Fatalf("open with the Tang key: %v", err)
	}
	if err == nil && o.KeyKind != "tang" {
		t.Fatalf("opened by %q, want tang", o.KeyKind)
	}
}

// clevisPass is `clevis luks pass` of a keyslot: what Clevis recovers.
func clevisPass(t *testing.T, dev string, slot int) []byte {
	t.Helper()
	clevis := testtool.Need(t, "clevis-luks", "clevis")[0]
	out, err := exec.Command(clevis, "luks", "pass", "-d", dev, "-s", strconv.Itoa(slot)).Output()
	if err != nil {
		var ee *exec.ExitError
		errors.As(err, &ee)
		t.Fatalf("clevis luks pass -d %s -s %d: %v: %s", dev, slot, err, ee.Stderr)
	}
	return out
}

// Clevis recovers the passphrase of the keyslot volumed bound, and
// cryptsetup accepts it.
func TestClevisOpensVolumedBinding(t *testing.T) {
	needCryptsetup(t)
	srv := tangtest.Start(t)
	dev := loopImage(t)
	fk, _ := randomKey(t)
	tk := TangKey{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	c := &Client{}
	var w procWatch
	w.watch(t, c)
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk, tk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	_, toks := clevisTokens(t, dev)
	if len(toks) != 1 || len(toks[0].Keyslots) != 1 {
		t.Fatalf("tokens %+v, want one clevis token bound to one keyslot", toks)
	}
	pass := clevisPass(t, dev, toks[0].Keyslots[0])
	w.check(t, pass)
	if len(pass) < 40 || bytes.Contains([]byte(toks[0].JWE), pass) {
		t.Fatalf("the Tang passphrase is %d bytes, or it is in the token in the clear", len(pass))
	}
	slot, ok, err := c.slotOf(tctx(t), dev, secret.FromBytes(pass))
	if err != nil || !ok || slot != toks[0].Keyslots[0] {
		t.Fatalf("cryptsetup open --test-passphrase with what clevis recovered: slot %d %v %v, want slot %d", slot, ok, err, toks[0].Keyslots[0])
	}
}

// volumed opens a volume bound by `clevis luks bind`.
func TestVolumedOpensClevisBinding(t *testing.T) {
	needCryptsetup(t)
	srv := tangtest.Start(t)
	clevis := testtool.Need(t, "clevis-luks", "clevis")[0]
	dev := loopImage(t)
	fk, _ := randomKey(t)
	c := &Client{}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	cfg := `{"url":"` + srv.URL + `","thp":"` + srv.Thumbprint() + `"}`
	if out, err := exec.Command(clevis, "luks", "bind", "-y", "-d", dev, "-k", fk.Path, "tang", cfg).CombinedOutput(); err != nil {
		t.Fatalf("clevis luks bind: %v: %s", err, out)
	}
	tk := TangKey{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	if ok, err := c.CheckKey(tctx(t), dev, tk); err != nil || !ok {
		t.Fatalf("volumed's Tang key does not open what clevis bound: %v %v", ok, err)
	}
	other := TangKey{URL: srv.URL, Thumbprint: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}
	if ok, err := c.CheckKey(tctx(t), dev, other); ok || err == nil {
		t.Fatalf("a Tang key pinned to another signing key opens: %v %v", ok, err)
	}
}

// A server whose signing key changed is refused, and the reason names
// both thumbprints.
func TestTangChangedKeyRefused(t *testing.T) {
	needCryptsetup(t)
	srv := tangtest.Start(t)
	dev := img(t, 32<<20)
	old := srv.Thumbprint()
	tk := TangKey{URL: srv.URL, Thumbprint: old}
	fk, _ := randomKey(t)
	c := &Client{}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk, tk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	srv.Rotate()
	ok, err := c.CheckKey(tctx(t), dev, tk)
	if ok || err == nil || !strings.Contains(err.Error(), old) || !strings.Contains(err.Error(), srv.Thumbprint()) {
		t.Fatalf("check against the rotated server: %v %v, want a refusal naming %s and %s", ok, err, old, srv.Thumbprint())
	}
	fresh := img(t, 32<<20)
	before := hashFile(t, fresh)
	err = c.Format(tctx(t), FormatOptions{Device: fresh, UUID: testUUID, Keys: []Key{fk, tk}, PBKDF: fast})
	if err == nil || !strings.Contains(err.Error(), srv.Thumbprint()) {
		t.Fatalf("format pinned to the old key: %v, want a refusal naming the served key", err)
	}
	if hashFile(t, fresh) != before {
		t.Fatal("a refused format wrote the device")
	}
}

// With its server down the volume stays locked and says it waits for
// the server; once the server is back it opens.
func TestTangServerDownThenUp(t *testing.T) {
	needCryptsetup(t)
	srv := tangtest.Start(t)
	dev := img(t, 32<<20)
	tk := TangKey{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	c := &Client{SysRoot: t.TempDir()}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{tk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	useNoDMCryptsetup(t, c)
	srv.Stop()
	o := OpenOptions{Device: dev, Name: "volumed-t", UUID: testUUID, Keys: []Key{tk}}
	_, err := c.Open(tctx(t), o)
	var le *LockedError
	if !errors.As(err, &le) || !strings.HasPrefix(le.Waiting(), "waiting for tang server "+srv.URL+": ") {
		t.Fatalf("open with the server down: %v, want a LockedError waiting for %s", err, srv.URL)
	}
	srv.Resume()
	if _, err := c.Open(tctx(t), o); err != nil && !strings.Contains(err.Error(), "not in sysfs") {
		t.Fatalf("open once the server is back: %v", err)
	}
}

// A new volume whose Tang key's server does not answer gets no header
// at all (no luksFormat, so no half-enrolled header that opens with
// nothing the manifest gives), and the error says which server it waits
// for, as a locked open does: the agent shows it as WaitingForKeyServer.
func TestFormatWaitsForItsTangServer(t *testing.T) {
	needCryptsetup(t)
	up, down := tangtest.Start(t), tangtest.Start(t)
	upKey := TangKey{URL: up.URL, Thumbprint: up.Thumbprint()}
	downKey := TangKey{URL: down.URL, Thumbprint: down.Thumbprint()}
	down.Stop()
	fk, _ := randomKey(t)
	for name, keys := range map[string][]Key{
		"tang":      {downKey},
		"threshold": {ThresholdKey{N: 2, Keys: []Share{upKey, downKey}}},
		"file+tang": {fk, downKey},
	} {
		t.Run(name, func(t *testing.T) {
			dev := img(t, 32<<20)
			err := (&Client{SysRoot: t.TempDir()}).Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: keys, PBKDF: fast})
			var w interface{ Waiting() string }
			if !errors.As(err, &w) || !strings.HasPrefix(w.Waiting(), "waiting for tang server "+down.URL+": ") {
				t.Fatalf("format with the server down: %v, want an error waiting for %s", err, down.URL)
			}
			if in, err := InspectDevice(dev); err != nil || in.Found() {
				t.Fatalf("the device got a LUKS header (%v) while its key server was down", err)
			}
		})
	}
}

// A Tang enrolment cut by a crash after its token went in converges on
// the next Format.
func TestTangEnrolConverges(t *testing.T) {
	needCryptsetup(t)
	srv := tangtest.Start(t)
	ctx := tctx(t)
	dev := img(t, 32<<20)
	tk := TangKey{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	fk, fb := randomKey(t)
	c := &Client{}
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	tok, pass, err := tk.seal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.importToken(ctx, dev, 0, tok(nil), false); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"luksAddKey", "--batch-mode"}, fast.args()...)
	args = append(args, "--key-file=/proc/self/fd/3", "--new-keyfile=/proc/self/fd/4", "--", dev)
	if _, err := c.run(ctx, args, secret.FromBytes(fb), pass); err != nil {
		t.Fatal(err)
	}
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk, tk}, PBKDF: fast}); err != nil {
		t.Fatalf("Format after the crash: %v", err)
	}
	h, toks := clevisTokens(t, dev)
	if h.Keyslots != 2 || len(toks) != 1 || len(toks[0].Keyslots) != 1 {
		t.Fatalf("after the rerun: %d keyslots, tokens %+v; want 2 keyslots and one bound token", h.Keyslots, toks)
	}
	if slot, ok, err := c.slotOf(ctx, dev, pass); err != nil || !ok || slot != toks[0].Keyslots[0] {
		t.Fatalf("the token's passphrase opens slot %d (%v %v), the token names %v", slot, ok, err, toks[0].Keyslots)
	}
}

func TestTryOrderPutsNetworkKeysLast(t *testing.T) {
	f, tk := FileKey{Path: "/k"}, TangKey{URL: "http://t"}
	for _, tc := range []struct {
		keys []Key
		want []int
	}{
		{[]Key{f}, []int{0}},
		{[]Key{tk, f}, []int{1, 0}},
		{[]Key{tk, TPM2Key{}, tk, f}, []int{1, 3, 0, 2}},
	} {
		if got := tryOrder(tc.keys); !slices.Equal(got, tc.want) {
			t.Errorf("tryOrder(%v) = %v, want %v", tc.keys, got, tc.want)
		}
	}
}

func TestClevisTokenJSON(t *testing.T) {
	ct := ClevisToken{Keyslots: []int{1}, JWE: "aGRy..aXY.Y3Q.dGFn"}
	js, err := ct.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"clevis","keyslots":["1"],"jwe":{"ciphertext":"Y3Q","encrypted_key":"","iv":"aXY","protected":"aGRy","tag":"dGFn"}}`
	if string(js) != want {
		t.Fatalf("token JSON\n got %s\nwant %s", js, want)
	}
	back, err := ParseClevisToken(js)
	if err != nil || back.JWE != ct.JWE || !slices.Equal(back.Keyslots, ct.Keyslots) {
		t.Fatalf("parse of its own JSON: %+v %v", back, err)
	}
	for _, bad := range []string{`{"type":"clevis","keyslots":["x"],"jwe":{}}`, `{"type":"luks2-keyring"}`, `{"type":"clevis","keyslots":[],"jwe":{"protected":"a.b","ciphertext":"c"}}`, `[`} {
		if _, err := ParseClevisToken([]byte(bad)); err == nil {
			t.Errorf("ParseClevisToken(%s) accepted", bad)
		}
	}
}

func FuzzClevisToken(f *testing.F) {
	f.Add([]byte(`{"type":"clevis","keyslots":["1"],"jwe":{"ciphertext":"Y3Q","encrypted_key":"","iv":"aXY","protected":"aGRy","tag":"dGFn"}}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		ct, err := ParseClevisToken(js)
		if err != nil {
			return
		}
		out, err := ct.MarshalJSON()
		if err != nil {
			t.Fatalf("a parsed token does not marshal: %v", err)
		}
		again, err := ParseClevisToken(out)
		if err != nil || again.JWE != ct.JWE || !slices.Equal(again.Keyslots, ct.Keyslots) {
			t.Fatalf("roundtrip: %+v %v, want %+v", again, err, ct)
		}
	})
}

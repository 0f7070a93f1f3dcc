package tang_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/drivers/tang"
	"github.com/volumed/volumed/drivers/tang/tangtest"
	"github.com/volumed/volumed/internal/testtool"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// A secret bound by Bind comes back by Recover, through the real tangd.
func TestBindRecoverRoundtrip(t *testing.T) {
	srv := tangtest.Start(t)
	s := tang.Server{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	secret := []byte("the keyslot's passphrase")
	jwe, err := s.Bind(ctx(t), secret)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains([]byte(jwe), secret) {
		t.Fatal("the JWE holds the secret in the clear")
	}
	b, err := tang.ParseBinding(jwe)
	if err != nil {
		t.Fatal(err)
	}
	if b.URL != srv.URL || !b.PinnedBy(srv.Thumbprint()) {
		t.Fatalf("binding url %q pinned by %s: %v", b.URL, srv.Thumbprint(), b.PinnedBy(srv.Thumbprint()))
	}
	got, err := s.Recover(ctx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, secret) {
		t.Fatalf("recovered %q, want %q", got, secret)
	}
}

// Clevis' own tang pin decrypts what Bind wrote, and Recover decrypts
// what `clevis encrypt tang` wrote.
func TestClevisCompatibleBothWays(t *testing.T) {
	srv := tangtest.Start(t)
	clevis := testtool.Need(t, "clevis", "clevis")[0]
	s := tang.Server{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	jwe, err := s.Bind(ctx(t), []byte("from volumed"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(clevis, "decrypt")
	cmd.Stdin = strings.NewReader(jwe)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("clevis decrypt of volumed's JWE: %v: %s", err, stderrOf(err))
	}
	if string(out) != "from volumed" {
		t.Fatalf("clevis decrypt: %q", out)
	}
	cmd = exec.Command(clevis, "encrypt", "tang", `{"url":"`+srv.URL+`","thp":"`+srv.Thumbprint()+`"}`)
	cmd.Stdin = strings.NewReader("from clevis")
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("clevis encrypt tang: %v: %s", err, stderrOf(err))
	}
	b, err := tang.ParseBinding(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Recover(ctx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "from clevis" {
		t.Fatalf("recovered %q", got)
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// A pin that is not the server's signing key is refused at binding and
// at recovery, and the error names both thumbprints; a server whose
// keys were rotated is refused the same way.
func TestChangedKeyRefused(t *testing.T) {
	srv := tangtest.Start(t)
	good := srv.Thumbprint()
	jwe, err := tang.Server{URL: srv.URL, Thumbprint: good}.Bind(ctx(t), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tang.ParseBinding(jwe)
	if err != nil {
		t.Fatal(err)
	}
	srv.Rotate()
	now := srv.Thumbprint()
	if now == good {
		t.Fatal("tangd-rotate-keys kept the signing key")
	}
	for name, do := range map[string]func() error{
		"bind": func() error {
			_, err := (tang.Server{URL: srv.URL, Thumbprint: good}).Bind(ctx(t), []byte("x"))
			return err
		},
		"recover": func() error { _, err := (tang.Server{URL: srv.URL, Thumbprint: good}).Recover(ctx(t), b); return err },
	} {
		err := do()
		var ke *tang.KeyChangedError
		if !errors.As(err, &ke) {
			t.Fatalf("%s against a rotated server: %v, want a KeyChangedError", name, err)
		}
		if !strings.Contains(err.Error(), good) || !strings.Contains(err.Error(), now) {
			t.Fatalf("%s: %q does not name the pinned %s and the served %s", name, err, good, now)
		}
	}
	// Pinned to the new key, the old binding is refused too: it was
	// not made with the new key's advertisement.
	_, err = tang.Server{URL: srv.URL, Thumbprint: now}.Recover(ctx(t), b)
	var ke *tang.KeyChangedError
	if !errors.As(err, &ke) {
		t.Fatalf("recover pinned to the new key: %v, want a KeyChangedError", err)
	}
	if _, err := (tang.Server{URL: srv.URL}).Bind(ctx(t), []byte("x")); err == nil || !strings.Contains(err.Error(), "no thumbprint") {
		t.Fatalf("bind with no pin: %v", err)
	}
}

// A server that is down is an UnreachableError naming its URL, and the
// same binding recovers once it is back.
func TestServerDownThenUp(t *testing.T) {
	srv := tangtest.Start(t)
	s := tang.Server{URL: srv.URL, Thumbprint: srv.Thumbprint()}
	jwe, err := s.Bind(ctx(t), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tang.ParseBinding(jwe)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err = s.Recover(ctx(t), b)
	var ue *tang.UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("recover from a stopped server: %v, want an UnreachableError naming %s", err, srv.URL)
	}
	srv.Resume()
	if got, err := s.Recover(ctx(t), b); err != nil || string(got) != "x" {
		t.Fatalf("recover after the server came back: %q, %v", got, err)
	}
}

package tpm2_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/drivers/tpm2"
	"github.com/volumed/volumed/drivers/tpm2/swtpmtest"
)

func open(t *testing.T, sock string) *tpm2.TPM {
	t.Helper()
	tpm, err := tpm2.Open(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tpm.Close() })
	return tpm
}

func secret(t *testing.T) []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSealUnseal(t *testing.T) {
	sock := swtpmtest.Start(t)
	tpm := open(t, sock)
	want := secret(t)
	s, err := tpm.Seal(want, []int{7, 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.PolicyHash) != 32 || len(s.PCRValues) != 2 || s.PCRs[0] != 0 || s.PCRs[1] != 7 {
		t.Errorf("sealed = PCRs %v, policy %x, %d PCR values; want sorted 0,7 with a sha256 policy and both values", s.PCRs, s.PolicyHash, len(s.PCRValues))
	}
	if bytes.Contains(s.Blob, want) {
		t.Error("the sealed blob holds the secret in the clear")
	}
	// A second connection (as after a restart) unseals it: the primary
	// key is derived again from the same template.
	tpm.Close()
	tpm = open(t, sock)
	start := time.Now()
	got, err := tpm.Unseal(s)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("unsealed a different secret")
	}
	t.Logf("unseal under swtpm took %s", took)
	// Without the PCR values (a token systemd made), it unseals alike.
	s.PCRValues = nil
	if got, err := tpm.Unseal(s); err != nil || !bytes.Equal(got, want) {
		t.Errorf("unseal without the sealed PCR values: %v", err)
	}
}

func TestExtendedPCRIsPolicyError(t *testing.T) {
	sock := swtpmtest.Start(t)
	tpm := open(t, sock)
	want := secret(t)
	s, err := tpm.Seal(want, []int{7, 11})
	if err != nil {
		t.Fatal(err)
	}
	if err := tpm.ExtendPCR(7, []byte("another boot chain")); err != nil {
		t.Fatal(err)
	}
	_, err = tpm.Unseal(s)
	if !errors.Is(err, tpm2.ErrPolicy) {
		t.Fatalf("unseal after extending PCR 7: %v, want ErrPolicy", err)
	}
	var pe *tpm2.PolicyError
	if !errors.As(err, &pe) || len(pe.Differ) != 1 || pe.Differ[0] != 7 {
		t.Errorf("policy error %#v, want PCR 7 named as the one that differs", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "PCR 7 differs") || !strings.Contains(msg, "7+11") {
		t.Errorf("message %q should say PCR 7 differs and that it was sealed to 7+11", msg)
	}
	if strings.Contains(msg, string(want)) {
		t.Error("the error holds the secret")
	}
	// Without the stored PCR values it still refuses, naming the policy.
	s.PCRValues = nil
	if _, err := tpm.Unseal(s); !errors.Is(err, tpm2.ErrPolicy) || !strings.Contains(err.Error(), "7+11") {
		t.Errorf("unseal without sealed values: %v, want ErrPolicy naming PCRs 7+11", err)
	}
	// With no policy hash to compare, the TPM itself refuses.
	s.PolicyHash = nil
	if _, err := tpm.Unseal(s); !errors.Is(err, tpm2.ErrPolicy) {
		t.Errorf("unseal with no known policy hash: %v, want ErrPolicy from the TPM", err)
	}
	// A PCR outside the policy changes nothing.
	s2, err := tpm.Seal(want, []int{7})
	if err != nil {
		t.Fatal(err)
	}
	if err := tpm.ExtendPCR(12, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := tpm.Unseal(s2); err != nil {
		t.Errorf("unseal after extending a PCR outside the policy: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	sock := swtpmtest.Start(t)
	tpm := open(t, sock)
	for _, pcrs := range [][]int{nil, {24}, {-1}, {7, 7}} {
		if _, err := tpm.Seal([]byte("x"), pcrs); err == nil {
			t.Errorf("Seal to PCRs %v succeeded", pcrs)
		}
	}
	if _, err := tpm.Seal(make([]byte, 129), []int{7}); err == nil {
		t.Error("sealed 129 bytes")
	}
	s, err := tpm.Seal([]byte("x"), []int{7})
	if err != nil {
		t.Fatal(err)
	}
	for _, blob := range [][]byte{nil, {0}, {0, 5, 1}, s.Blob[:len(s.Blob)-1], append(bytes.Clone(s.Blob), 0)} {
		bad := s
		bad.Blob = blob
		if _, err := tpm.Unseal(bad); err == nil || errors.Is(err, tpm2.ErrPolicy) {
			t.Errorf("unseal of a mangled blob of %d bytes: %v, want a plain error", len(blob), err)
		}
	}
	// A blob whose bytes are flipped is refused by the TPM (integrity).
	bad := s
	bad.Blob = bytes.Clone(s.Blob)
	bad.Blob[10] ^= 0xff
	if _, err := tpm.Unseal(bad); err == nil {
		t.Error("unsealed a corrupted blob")
	}
}

func TestAnotherTPMCannotUnseal(t *testing.T) {
	a := open(t, swtpmtest.Start(t))
	b := open(t, swtpmtest.Start(t))
	s, err := a.Seal(secret(t), []int{7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Unseal(s); err == nil || errors.Is(err, tpm2.ErrPolicy) {
		t.Errorf("another TPM: %v, want a load error", err)
	}
}

// A TPM that never answers (a wedged chip, a dead software TPM) does not
// hold the caller past its context.
func TestHungTPMHonoursTheContext(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hung.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // read nothing, answer nothing
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tpm, err := tpm2.Open(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	start := time.Now()
	_, err = tpm.Seal([]byte("x"), []int{7})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("seal on a TPM that never answers: %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("seal took %s on a 300ms context", took)
	}
}

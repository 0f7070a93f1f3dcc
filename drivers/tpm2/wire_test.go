package tpm2

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/volumed/volumed/drivers/tpm2/swtpmtest"
)

// wire records every command and response, as a bus sniffer or the
// resource manager would see them.
type wire struct {
	transport.TPMCloser
	seen [][]byte
}

func (w *wire) Send(cmd []byte) ([]byte, error) {
	rsp, err := w.TPMCloser.Send(cmd)
	w.seen = append(w.seen, bytes.Clone(cmd), bytes.Clone(rsp))
	return rsp, err
}

func TestSecretNeverCrossesTheWireInClear(t *testing.T) {
	tpm, err := Open(context.Background(), swtpmtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	w := &wire{TPMCloser: tpm.t}
	tpm.t = w
	secret := make([]byte, 32)
	rand.Read(secret)
	s, err := tpm.Seal(secret, []int{7})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpm.Unseal(s)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("round trip: %v", err)
	}
	if len(w.seen) < 10 {
		t.Fatalf("only %d messages recorded: the wire was not watched", len(w.seen))
	}
	for i, m := range w.seen {
		if bytes.Contains(m, secret) {
			t.Fatalf("message %d carries the secret in clear", i)
		}
	}
}

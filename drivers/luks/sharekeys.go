package luks

import (
	"context"
	"fmt"
	"slices"

	"github.com/volumed/volumed/drivers/tang"
	"github.com/volumed/volumed/drivers/tpm2pin"
)

// A Tang key's share is Clevis' tang pin; a TPM2 key's is Clevis' tpm2
// pin (not systemd's token: a share is a JWE inside the sss JWE).

func (k TangKey) bindShare(ctx context.Context, plaintext []byte) (string, error) {
	jwe, err := k.server().Bind(ctx, plaintext)
	return jwe, waiting(err)
}

// matches: a binding pinned by k's thumbprint, made with k's URL or,
// less surely, another.
func (k TangKey) matches(jwe string) match {
	tb, err := tang.ParseBinding(jwe)
	switch {
	case err != nil || k.Thumbprint == "" || !tb.PinnedBy(k.Thumbprint):
		return noMatch
	case tb.URL == k.URL:
		return exactMatch
	}
	return sameKey
}

func (k TangKey) recoverShare(ctx context.Context, jwe string) ([]byte, error) {
	tb, err := tang.ParseBinding(jwe)
	if err != nil {
		return nil, err
	}
	p, err := k.server().Recover(ctx, tb)
	k.Answers.note(k.URL, err)
	return p, waiting(err)
}

func (k TangKey) unanswered() bool { return k.Answers.unanswered(k.URL) }

func (k TPM2Key) needsNetwork() bool { return false }

func (k TPM2Key) unanswered() bool { return false }

func (k TPM2Key) bindShare(ctx context.Context, plaintext []byte) (string, error) {
	tpm, err := k.open(ctx)
	if err != nil {
		return "", err
	}
	defer tpm.Close()
	return tpm2pin.Bind(tpm, k.PCRs, plaintext)
}

// matches: a Clevis tpm2 binding sealed to the same PCRs.
func (k TPM2Key) matches(jwe string) match {
	b, err := tpm2pin.Parse(jwe)
	if err != nil || !slices.Equal(b.PCRs, slices.Sorted(slices.Values(k.PCRs))) {
		return noMatch
	}
	return exactMatch
}

func (k TPM2Key) recoverShare(ctx context.Context, jwe string) ([]byte, error) {
	b, err := tpm2pin.Parse(jwe)
	if err != nil {
		return nil, err
	}
	tpm, err := k.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("tpm2: %w", err)
	}
	defer tpm.Close()
	return b.Recover(tpm)
}

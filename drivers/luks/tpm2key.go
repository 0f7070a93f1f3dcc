package luks

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/volumed/volumed/drivers/tpm2"
	"github.com/volumed/volumed/internal/secret"
)

// DefaultTPM is the kernel's TPM2 resource manager, which lets several
// programs use the TPM at once.
const DefaultTPM = tpm2.DefaultDevice

// TPM2Key is a random volume key sealed by the host's TPM2 to the values
// of PCRs; the sealed blob lives in a systemd-tpm2 token on the LUKS2
// header, so the disk carries what it needs to be opened on this host.
// Device is "" for DefaultTPM, or another TPM device or a software TPM's
// unix socket.
type TPM2Key struct {
	Device string // "" for DefaultTPM
	PCRs   []int
}

func (k TPM2Key) Kind() string { return "tpm2" }

func (k TPM2Key) Describe() string { return "tpm2 pcrs " + tpm2.JoinPCRs(k.PCRs) }

func (k TPM2Key) Material(context.Context) (secret.Value, error) {
	return secret.Value{}, ErrSealedKey
}

// tpm2PBKDF is systemd-cryptenroll's KDF for a keyslot whose passphrase
// is a random secret (cryptsetup_set_minimal_pbkdf): a slow KDF adds
// nothing to 256 random bits.
var tpm2PBKDF = PBKDF{Type: "pbkdf2", Hash: "sha512", Iterations: 1000}

func (k TPM2Key) open(ctx context.Context) (*tpm2.TPM, error) {
	return tpm2.Open(ctx, cmp.Or(k.Device, DefaultTPM))
}

// usable checks, before Format touches a device, that k's PCRs make a
// policy and its TPM answers.
func (k TPM2Key) usable(ctx context.Context) error {
	if err := tpm2.CheckPCRs(k.PCRs); err != nil {
		return err
	}
	t, err := k.open(ctx)
	if err != nil {
		return err
	}
	defer t.Close()
	_, err = t.ReadPCRs(k.PCRs)
	return err
}

// unsealTokens unseals each systemd-tpm2 token of h with this key's TPM
// and returns the passphrases in token order, or why there is none.
func (k TPM2Key) unsealTokens(ctx context.Context, h Header) ([]secret.Value, error) {
	var toks []TPM2Token
	var reasons []string
	for _, t := range h.TokenObjects {
		if t.Type != TokenTPM2 {
			continue
		}
		tt, err := ParseTPM2Token(t.JSON)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("token %d: %v", t.ID, err))
			continue
		}
		toks = append(toks, tt)
	}
	if len(toks) == 0 {
		if len(reasons) > 0 {
			return nil, fmt.Errorf("tpm2: %s", strings.Join(reasons, "; "))
		}
		return nil, errors.New("tpm2: the header carries no systemd-tpm2 token")
	}
	tpm, err := k.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("tpm2: %w", err)
	}
	defer tpm.Close()
	var out []secret.Value
	for _, tt := range toks {
		s, err := tpm.Unseal(tt.Sealed)
		if err != nil {
			reasons = append(reasons, tpm2Reason(err))
			continue
		}
		out = append(out, secret.FromBytes(tpm2Passphrase(s)))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tpm2: %s", strings.Join(reasons, "; "))
	}
	return out, nil
}

// tpm2Reason is an unseal failure for a LockedError: a policy mismatch
// as the PCRs that changed, anything else as it is.
func tpm2Reason(err error) string {
	var pe *tpm2.PolicyError
	if errors.As(err, &pe) {
		return pe.Error()
	}
	return err.Error()
}

func seal(tpm *tpm2.TPM, k TPM2Key) (tpm2.Sealed, secret.Value, error) {
	s := make([]byte, 32)
	if _, err := rand.Read(s); err != nil {
		return tpm2.Sealed{}, secret.Value{}, err
	}
	sealed, err := tpm.Seal(s, k.PCRs)
	if err != nil {
		return tpm2.Sealed{}, secret.Value{}, err
	}
	return sealed, secret.FromBytes(tpm2Passphrase(s)), nil
}

// seal makes a new secret sealed to k's PCRs: its token (for the
// keyslots given) and its passphrase.
func (k TPM2Key) seal(ctx context.Context) (tokenFor, secret.Value, error) {
	tpm, err := k.open(ctx)
	if err != nil {
		return nil, secret.Value{}, err
	}
	defer tpm.Close()
	sealed, pass, err := seal(tpm, k)
	if err != nil {
		return nil, secret.Value{}, err
	}
	return tpm2TokenFor(sealed), pass, nil
}

func tpm2TokenFor(sealed tpm2.Sealed) tokenFor {
	return func(slots []int) json.Marshaler { return TPM2Token{Keyslots: slots, Sealed: sealed} }
}

// enrolled finds a systemd-tpm2 token of k's PCRs that this TPM unseals:
// an enrolment a crash interrupted, or one that is whole.
func (k TPM2Key) enrolled(ctx context.Context, h Header) (enrolledToken, bool, error) {
	if err := tpm2.CheckPCRs(k.PCRs); err != nil {
		return enrolledToken{}, false, err
	}
	tpm, err := k.open(ctx)
	if err != nil {
		return enrolledToken{}, false, err
	}
	defer tpm.Close()
	pcrs := slices.Sorted(slices.Values(k.PCRs))
	for _, t := range h.TokenObjects {
		if t.Type != TokenTPM2 {
			continue
		}
		tt, err := ParseTPM2Token(t.JSON)
		if err != nil || !slices.Equal(tt.Sealed.PCRs, pcrs) {
			continue
		}
		s, err := tpm.Unseal(tt.Sealed)
		if err != nil {
			continue
		}
		return enrolledToken{ID: t.ID, Token: tpm2TokenFor(tt.Sealed), Pass: secret.FromBytes(tpm2Passphrase(s))}, true, nil
	}
	return enrolledToken{}, false, nil
}

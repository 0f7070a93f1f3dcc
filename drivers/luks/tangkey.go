package luks

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/volumed/volumed/drivers/tang"
	"github.com/volumed/volumed/internal/secret"
)

// TangKey is a random volume key bound to a Tang server, whose signing
// key is pinned by Thumbprint: the disk opens only while that server
// answers. The binding (a JWE) lives in a clevis token of the LUKS2
// header, as `clevis luks bind` writes it.
type TangKey struct {
	URL        string
	Thumbprint string
	HTTP       *http.Client // nil for one with tang.DefaultTimeout
	// Answers, when set, is told whether the server answered each
	// request for a share, and orders a threshold's requests.
	Answers *Answers
}

var (
	_ sealedKey = TangKey{}
	_ sealedKey = TPM2Key{}
)

func (k TangKey) Kind() string     { return "tang" }
func (k TangKey) Describe() string { return "tang " + k.URL }

func (k TangKey) Material(context.Context) (secret.Value, error) {
	return secret.Value{}, ErrSealedKey
}

// needsNetwork: Open tries a Tang key after the keys that need no
// network, so an unreachable server costs nothing when a key file or
// the TPM opens the volume.
func (k TangKey) needsNetwork() bool { return true }

func (k TangKey) server() tang.Server {
	return tang.Server{URL: k.URL, Thumbprint: k.Thumbprint, HTTP: k.HTTP}
}

// WaitingError is a Tang server that did not answer: the volume waits
// for it and tries again.
type WaitingError struct{ Err *tang.UnreachableError }

func (e *WaitingError) Error() string {
	return fmt.Sprintf("waiting for tang server %s: %v", e.Err.URL, e.Err.Err)
}
func (e *WaitingError) Unwrap() error { return e.Err }

// Waiting says which server the volume waits for and its last error: a
// Format that stopped before luksFormat because a Tang server did not
// answer waits for it as a locked Open does (LockedError.Waiting).
func (e *WaitingError) Waiting() string { return e.Error() }

// waiting turns an unreachable server into a WaitingError.
func waiting(err error) error {
	var ue *tang.UnreachableError
	if errors.As(err, &ue) {
		return &WaitingError{Err: ue}
	}
	return err
}

func (k TangKey) usable(ctx context.Context) error {
	_, err := k.server().Advertise(ctx)
	k.Answers.note(k.URL, err)
	return waiting(err)
}

// tangPassphrase is the keyslot passphrase of a Tang binding: random,
// base64 (printable, as Clevis' own are), and the JWE's plaintext.
func tangPassphrase() (secret.Value, error) {
	s := make([]byte, 32)
	if _, err := rand.Read(s); err != nil {
		return secret.Value{}, err
	}
	return secret.FromBytes([]byte(base64.StdEncoding.EncodeToString(s))), nil
}

func (k TangKey) seal(ctx context.Context) (tokenFor, secret.Value, error) {
	pass, err := tangPassphrase()
	if err != nil {
		return nil, secret.Value{}, err
	}
	jwe, err := k.server().Bind(ctx, pass.RevealBytes())
	if err != nil {
		return nil, secret.Value{}, waiting(err)
	}
	return clevisTokenFor(jwe), pass, nil
}

func clevisTokenFor(jwe string) tokenFor {
	return func(slots []int) json.Marshaler { return ClevisToken{Keyslots: slots, JWE: jwe} }
}

// tangToken is a clevis token of a header and its binding.
type tangToken struct {
	id  int
	jwe string
	b   tang.Binding
}

// bindings are the header's clevis tang tokens pinned by k's key, and
// why others were passed over.
func (k TangKey) bindings(h Header) (bs []tangToken, reasons []string) {
	for _, t := range h.TokenObjects {
		if t.Type != TokenClevis {
			continue
		}
		ct, err := ParseClevisToken(t.JSON)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("token %d: %v", t.ID, err))
			continue
		}
		b, err := tang.ParseBinding(ct.JWE)
		if errors.Is(err, tang.ErrNotTang) {
			continue
		}
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("token %d: %v", t.ID, err))
			continue
		}
		if !b.PinnedBy(k.Thumbprint) {
			reasons = append(reasons, fmt.Sprintf("token %d: bound to tang server %s with another signing key than the pinned %s", t.ID, b.URL, k.Thumbprint))
			continue
		}
		bs = append(bs, tangToken{id: t.ID, jwe: ct.JWE, b: b})
	}
	return bs, reasons
}

// unsealTokens recovers the passphrase of each clevis token of h bound
// to k's server. An unreachable server is a WaitingError.
func (k TangKey) unsealTokens(ctx context.Context, h Header) ([]secret.Value, error) {
	bs, reasons := k.bindings(h)
	if len(bs) == 0 {
		if len(reasons) > 0 {
			return nil, fmt.Errorf("tang: %s", strings.Join(reasons, "; "))
		}
		return nil, fmt.Errorf("tang: the header carries no clevis token bound to %s (thumbprint %s)", k.URL, k.Thumbprint)
	}
	var out []secret.Value
	var last error
	for _, b := range bs {
		p, err := k.server().Recover(ctx, b.b)
		if err != nil {
			last = waiting(err)
			continue
		}
		out = append(out, secret.FromBytes(p))
	}
	if len(out) == 0 {
		return nil, last
	}
	return out, nil
}

// enrolled finds a clevis token pinned by k's key whose binding the
// server recovers.
func (k TangKey) enrolled(ctx context.Context, h Header) (enrolledToken, bool, error) {
	bs, _ := k.bindings(h)
	for _, b := range bs {
		p, err := k.server().Recover(ctx, b.b)
		if err != nil {
			var ue *tang.UnreachableError
			if errors.As(err, &ue) {
				return enrolledToken{}, false, waiting(err)
			}
			continue
		}
		return enrolledToken{ID: b.id, Token: clevisTokenFor(b.jwe), Pass: secret.FromBytes(p)}, true, nil
	}
	return enrolledToken{}, false, nil
}

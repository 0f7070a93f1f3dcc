package luks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/volumed/volumed/drivers/sss"
	"github.com/volumed/volumed/internal/secret"
)

// ThresholdKey is a random volume key split by Clevis' sss pin so that
// any N of its keys recover it ("2 of 3 Tang servers", "TPM2 and Tang");
// the JWE lives in a clevis token, as `clevis luks bind ... sss` writes
// it. Its keys are Tang keys, TPM2 keys (Clevis' tpm2 pin) or thresholds
// (a nested sss pin).
type ThresholdKey struct {
	N    int
	Keys []Share
}

// Share is a key that can hold a share of a threshold: a TangKey, a
// TPM2Key or a ThresholdKey.
type Share interface {
	Key
	usable(ctx context.Context) error
	needsNetwork() bool
	// unanswered: the key's server left its last request unanswered
	// (Answers).
	unanswered() bool
	// bindShare encrypts a share with the key's Clevis pin and returns
	// the pin's JWE.
	bindShare(ctx context.Context, plaintext []byte) (string, error)
	// matches says how surely jwe is this key's making: noMatch, or
	// sameKey (a Tang binding of the key's server under another URL),
	// or exactMatch.
	matches(jwe string) match
	// recoverShare decrypts a share this key matches.
	recoverShare(ctx context.Context, jwe string) ([]byte, error)
}

type match int

const (
	noMatch match = iota
	sameKey
	exactMatch
)

var (
	_ sealedKey = ThresholdKey{}
	_ Share     = ThresholdKey{}
	_ Share     = TangKey{}
	_ Share     = TPM2Key{}
)

func (k ThresholdKey) Kind() string { return "threshold" }

func (k ThresholdKey) Describe() string {
	var subs []string
	for _, s := range k.Keys {
		subs = append(subs, s.Describe())
	}
	return fmt.Sprintf("threshold %d of (%s)", k.N, strings.Join(subs, ", "))
}

func (k ThresholdKey) Material(context.Context) (secret.Value, error) {
	return secret.Value{}, ErrSealedKey
}

// needsNetwork: a threshold that no Tang key is a share of opens
// without the network.
func (k ThresholdKey) needsNetwork() bool {
	return slices.ContainsFunc(k.Keys, Share.needsNetwork)
}

// usable checks every key: a share is bound to each at format.
func (k ThresholdKey) usable(ctx context.Context) error {
	if k.N < 1 || k.N > len(k.Keys) {
		return fmt.Errorf("threshold %d of %d keys: n must be from 1 to the number of keys", k.N, len(k.Keys))
	}
	var errs []error
	for _, s := range k.Keys {
		if err := s.usable(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// binder is a share's pin as sss.Bind takes it.
type binder struct{ s Share }

func (b binder) Bind(ctx context.Context, plaintext []byte) (string, error) {
	return b.s.bindShare(ctx, plaintext)
}

func (k ThresholdKey) bindShare(ctx context.Context, plaintext []byte) (string, error) {
	pins := make([]sss.Binder, len(k.Keys))
	for i, s := range k.Keys {
		pins[i] = binder{s}
	}
	jwe, err := sss.Bind(ctx, k.N, pins, plaintext)
	return jwe, waiting(err)
}

func (k ThresholdKey) seal(ctx context.Context) (tokenFor, secret.Value, error) {
	if err := k.usable(ctx); err != nil {
		return nil, secret.Value{}, err
	}
	pass, err := tangPassphrase()
	if err != nil {
		return nil, secret.Value{}, err
	}
	jwe, err := k.bindShare(ctx, pass.RevealBytes())
	if err != nil {
		return nil, secret.Value{}, err
	}
	return clevisTokenFor(jwe), pass, nil
}

// sssToken is a clevis sss token of a header, and which of the key's
// keys recovers each of its shares.
type sssToken struct {
	id     int
	jwe    string
	b      sss.Binding
	shares []int // index into ThresholdKey.Keys, per share
}

// bindings are the header's clevis sss tokens of k: threshold N, and
// each share bound to one of k's keys, all of them.
func (k ThresholdKey) bindings(h Header) []sssToken {
	var out []sssToken
	for _, t := range h.TokenObjects {
		if t.Type != TokenClevis {
			continue
		}
		ct, err := ParseClevisToken(t.JSON)
		if err != nil {
			continue
		}
		if b, shares, ok := k.parse(ct.JWE); ok {
			out = append(out, sssToken{id: t.ID, jwe: ct.JWE, b: b, shares: shares})
		}
	}
	return out
}

// parse reads jwe as an sss binding of k: threshold N, as many shares
// as keys, each matched to one of them.
func (k ThresholdKey) parse(jwe string) (sss.Binding, []int, bool) {
	b, err := sss.Parse(jwe)
	if err != nil || b.T != k.N || len(b.JWEs) != len(k.Keys) {
		return sss.Binding{}, nil, false
	}
	shares, ok := assign(k.Keys, b.JWEs)
	return b, shares, ok
}

// assign matches each share to another of keys: first the exact
// matches (a Tang binding made with the key's URL: two servers may share
// their keys, a replicated Tang behind two names), then any (a Tang
// server that moved). ok is false when a share has no key.
func assign(keys []Share, jwes []string) ([]int, bool) {
	score := make([][]match, len(jwes))
	for i, j := range jwes {
		score[i] = make([]match, len(keys))
		for n, s := range keys {
			score[i][n] = s.matches(j)
		}
	}
	shares := make([]int, len(jwes))
	used := make([]bool, len(keys))
	for pass, least := range []match{exactMatch, sameKey} {
		for i := range jwes {
			if pass > 0 && shares[i] >= 0 {
				continue
			}
			shares[i] = -1
			for n := range keys {
				if !used[n] && score[i][n] >= least {
					shares[i], used[n] = n, true
					break
				}
			}
		}
	}
	return shares, !slices.Contains(shares, -1)
}

func (k ThresholdKey) matches(jwe string) match {
	if _, _, ok := k.parse(jwe); ok {
		return exactMatch
	}
	return noMatch
}

func (k ThresholdKey) recoverShare(ctx context.Context, jwe string) ([]byte, error) {
	b, shares, ok := k.parse(jwe)
	if !ok {
		return nil, fmt.Errorf("not a share of %s", k.Describe())
	}
	return b.Recover(ctx, k.order(shares), k.recoverShares(shares))
}

// order is askOrder over k's keys: a TPM2 share opens at once, and a
// server that does not answer then costs nothing when enough others do;
// one that did not answer last time is asked first when k cannot be met
// without it.
func (k ThresholdKey) order(shares []int) []int {
	local := make([]bool, len(shares))
	unanswered := make([]bool, len(shares))
	for i, n := range shares {
		local[i] = !k.Keys[n].needsNetwork()
		unanswered[i] = k.Keys[n].unanswered()
	}
	return askOrder(k.N, local, unanswered)
}

// unanswered: a nested threshold is taken as answering (it orders its
// own shares).
func (k ThresholdKey) unanswered() bool { return false }

// recoverShares decrypts each share with the key assigned to it; an
// unreachable server is a WaitingError.
func (k ThresholdKey) recoverShares(shares []int) func(ctx context.Context, i int, jwe string) ([]byte, error) {
	return func(ctx context.Context, i int, jwe string) ([]byte, error) {
		return k.Keys[shares[i]].recoverShare(ctx, jwe)
	}
}

func (k ThresholdKey) unsealTokens(ctx context.Context, h Header) ([]secret.Value, error) {
	bs := k.bindings(h)
	if len(bs) == 0 {
		return nil, fmt.Errorf("the header carries no clevis sss token of %s", k.Describe())
	}
	var out []secret.Value
	var last error
	for _, b := range bs {
		p, err := b.b.Recover(ctx, k.order(b.shares), k.recoverShares(b.shares))
		if err != nil {
			last = err
			continue
		}
		out = append(out, secret.FromBytes(p))
	}
	if len(out) == 0 {
		return nil, last
	}
	return out, nil
}

func (k ThresholdKey) enrolled(ctx context.Context, h Header) (enrolledToken, bool, error) {
	for _, b := range k.bindings(h) {
		p, err := b.b.Recover(ctx, k.order(b.shares), k.recoverShares(b.shares))
		if err != nil {
			var we *WaitingError
			if errors.As(err, &we) {
				return enrolledToken{}, false, err
			}
			continue
		}
		return enrolledToken{ID: b.id, Token: clevisTokenFor(b.jwe), Pass: secret.FromBytes(p)}, true, nil
	}
	return enrolledToken{}, false, nil
}

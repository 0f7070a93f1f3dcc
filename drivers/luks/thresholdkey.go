package luks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/volumed/volumed/drivers/sss"
	"github.com/volumed/volumed/drivers/tang"
	"github.com/volumed/volumed/internal/secret"
)

// ThresholdKey is a random volume key split by Clevis' sss pin so that
// any N of its Tang keys recover it ("2 of 3 Tang servers"); the JWE
// lives in a clevis token, as `clevis luks bind ... sss` writes it.
type ThresholdKey struct {
	N    int
	Keys []TangKey
}

var _ sealedKey = ThresholdKey{}

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

func (k ThresholdKey) needsNetwork() bool { return true }

// usable checks every server: a share is bound to each at format.
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

func (k ThresholdKey) seal(ctx context.Context) (tokenFor, secret.Value, error) {
	if err := k.usable(ctx); err != nil {
		return nil, secret.Value{}, err
	}
	pass, err := tangPassphrase()
	if err != nil {
		return nil, secret.Value{}, err
	}
	pins := make([]sss.Binder, len(k.Keys))
	for i, s := range k.Keys {
		pins[i] = s.server()
	}
	jwe, err := sss.Bind(ctx, k.N, pins, pass.RevealBytes())
	if err != nil {
		return nil, secret.Value{}, waiting(err)
	}
	return clevisTokenFor(jwe), pass, nil
}

// sssToken is a clevis sss token of a header, and which of the key's
// Tang keys recovers each of its shares.
type sssToken struct {
	id     int
	jwe    string
	b      sss.Binding
	shares []int // index into ThresholdKey.Keys, per share
}

// bindings are the header's clevis sss tokens of k: threshold N, and
// each share bound to one of k's servers, all of them.
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
		b, err := sss.Parse(ct.JWE)
		if err != nil || b.T != k.N || len(b.JWEs) != len(k.Keys) {
			continue
		}
		if shares, ok := k.assign(b); ok {
			out = append(out, sssToken{id: t.ID, jwe: ct.JWE, b: b, shares: shares})
		}
	}
	return out
}

// assign matches each share of b to another of k's keys: a tang binding
// pinned by the key's thumbprint, made with its URL where one is (two
// servers may share their keys, a replicated Tang behind two names), else
// with any URL (a server that moved). ok is false when a share has none.
func (k ThresholdKey) assign(b sss.Binding) ([]int, bool) {
	tbs := make([]tang.Binding, len(b.JWEs))
	for i, j := range b.JWEs {
		tb, err := tang.ParseBinding(j)
		if err != nil {
			return nil, false
		}
		tbs[i] = tb
	}
	shares := make([]int, len(tbs))
	used := make([]bool, len(k.Keys))
	for pass, sameURL := range []bool{true, false} {
		for i, tb := range tbs {
			if pass > 0 && shares[i] >= 0 {
				continue
			}
			shares[i] = -1
			for j, s := range k.Keys {
				if !used[j] && s.Thumbprint != "" && tb.PinnedBy(s.Thumbprint) && (!sameURL || s.URL == tb.URL) {
					shares[i], used[j] = j, true
					break
				}
			}
		}
	}
	return shares, !slices.Contains(shares, -1)
}

// recoverShares decrypts each share of t with the key assigned to it;
// an unreachable server is a WaitingError.
func (k ThresholdKey) recoverShares(t sssToken) func(ctx context.Context, i int, jwe string) ([]byte, error) {
	return func(ctx context.Context, i int, jwe string) ([]byte, error) {
		tb, err := tang.ParseBinding(jwe)
		if err != nil {
			return nil, err
		}
		p, err := k.Keys[t.shares[i]].server().Recover(ctx, tb)
		return p, waiting(err)
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
		p, err := b.b.Recover(ctx, k.recoverShares(b))
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
		p, err := b.b.Recover(ctx, k.recoverShares(b))
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

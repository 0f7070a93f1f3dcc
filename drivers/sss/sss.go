// Package sss is Clevis' sss pin: a random content key split by Shamir's
// secret sharing over a random 256-bit prime field, each share (a point
// x‖y) encrypted by another pin, any t of which recover the key. The
// JWE is Clevis' own (alg dir, enc A256GCM, clevis.sss {p, t, jwe}), so
// `clevis decrypt` opens what Bind makes and Parse reads what `clevis
// encrypt sss` makes.
package sss

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strings"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/volumed/volumed/internal/jweheader"
)

// size is the byte length of the prime, of each coordinate and of the
// content key (A256GCM).
const size = 32

// Binder encrypts a share with another pin (a Tang server).
type Binder interface {
	Bind(ctx context.Context, plaintext []byte) (string, error)
}

type clevisHeader struct {
	Pin string `json:"pin"`
	SSS *field `json:"sss"`
}

type field struct {
	P   string   `json:"p"`
	T   int      `json:"t"`
	JWE []string `json:"jwe"`
}

// Bind splits a new key so that any t of pins recover it, and encrypts
// plaintext with it.
func Bind(ctx context.Context, t int, pins []Binder, plaintext []byte) (string, error) {
	if t < 1 || t > len(pins) {
		return "", fmt.Errorf("sss: threshold %d of %d pins: must be from 1 to the number of pins", t, len(pins))
	}
	p, err := rand.Prime(rand.Reader, size*8)
	if err != nil {
		return "", err
	}
	coeff := make([]*big.Int, t)
	for i := range coeff {
		if coeff[i], err = rand.Int(rand.Reader, p); err != nil {
			return "", err
		}
	}
	f := field{P: base64.RawURLEncoding.EncodeToString(p.FillBytes(make([]byte, size))), T: t}
	seen := map[string]bool{"0": true} // x = 0 would be the key itself
	for i, pin := range pins {
		x := big.NewInt(0)
		for seen[x.String()] {
			if x, err = rand.Int(rand.Reader, p); err != nil {
				return "", err
			}
		}
		seen[x.String()] = true
		jwe, err := pin.Bind(ctx, share(x, eval(coeff, x, p)))
		if err != nil {
			return "", fmt.Errorf("sss: pin %d: %w", i, err)
		}
		f.JWE = append(f.JWE, jwe)
	}
	opts := (&jose.EncrypterOptions{}).WithHeader("clevis", clevisHeader{Pin: "sss", SSS: &f})
	enc, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.DIRECT, Key: coeff[0].FillBytes(make([]byte, size))}, opts)
	if err != nil {
		return "", fmt.Errorf("sss: %w", err)
	}
	obj, err := enc.Encrypt(plaintext)
	if err != nil {
		return "", fmt.Errorf("sss: %w", err)
	}
	return obj.CompactSerialize()
}

// eval is the polynomial of coeff at x, mod p.
func eval(coeff []*big.Int, x, p *big.Int) *big.Int {
	y := new(big.Int)
	for i := len(coeff) - 1; i >= 0; i-- { // Horner
		y.Mul(y, x).Add(y, coeff[i]).Mod(y, p)
	}
	return y
}

func share(x, y *big.Int) []byte {
	b := make([]byte, 2*size)
	x.FillBytes(b[:size])
	y.FillBytes(b[size:])
	return b
}

// Binding is a parsed Clevis sss JWE.
type Binding struct {
	T    int
	JWEs []string // each share's JWE, of another pin
	p    *big.Int
	jwe  *jose.JSONWebEncryption
}

// ErrNotSSS: a JWE of another pin.
var ErrNotSSS = errors.New("not a clevis sss binding")

// Parse reads a Clevis sss JWE in compact serialization.
func Parse(compact string) (Binding, error) {
	var h struct {
		Clevis clevisHeader `json:"clevis"`
	}
	if err := jweheader.Decode(compact, &h); err != nil {
		return Binding{}, err
	}
	if h.Clevis.Pin != "sss" || h.Clevis.SSS == nil {
		return Binding{}, fmt.Errorf("JWE pin %q: %w", h.Clevis.Pin, ErrNotSSS)
	}
	f := h.Clevis.SSS
	pb, err := base64.RawURLEncoding.DecodeString(f.P)
	if err != nil || len(pb) != size {
		return Binding{}, fmt.Errorf("clevis.sss.p: not a %d-byte prime (%v)", size, err)
	}
	b := Binding{T: f.T, JWEs: f.JWE, p: new(big.Int).SetBytes(pb)}
	if b.T < 1 || b.T > len(b.JWEs) {
		return Binding{}, fmt.Errorf("clevis.sss: threshold %d of %d shares", b.T, len(b.JWEs))
	}
	if !b.p.ProbablyPrime(32) {
		return Binding{}, errors.New("clevis.sss.p: not a prime")
	}
	if b.jwe, err = jose.ParseEncryptedCompact(compact, []jose.KeyAlgorithm{jose.DIRECT}, []jose.ContentEncryption{jose.A256GCM}); err != nil {
		return Binding{}, fmt.Errorf("JWE: %w", err)
	}
	return b, nil
}

// ShareError is a threshold that too few shares met: each failed share
// and why.
type ShareError struct {
	T, Got  int
	Errs    []error // per share, nil for those recovered or not asked
	Unasked []int   // the shares not asked once the threshold was out of reach
}

func (e *ShareError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "threshold %d of %d: %d recovered", e.T, len(e.Errs), e.Got)
	for i, err := range e.Errs {
		if err != nil {
			fmt.Fprintf(&b, "; share %d: %v", i, err)
		}
	}
	for _, i := range e.Unasked {
		fmt.Fprintf(&b, "; share %d not asked (too few shares left to meet the threshold)", i)
	}
	return b.String()
}

// Unwrap lets errors.As find why a share failed (a server that did not
// answer).
func (e *ShareError) Unwrap() []error { return e.Errs }

// Recover recovers the plaintext with recover, which decrypts share i's
// JWE with its pin; it asks for the shares in the order given (nil: as
// they are in the JWE; the caller puts first the shares that cost least,
// a TPM's before a server's) and stops at the threshold.
func (b Binding) Recover(ctx context.Context, order []int, recover func(ctx context.Context, i int, jwe string) ([]byte, error)) ([]byte, error) {
	if order == nil {
		order = make([]int, len(b.JWEs))
		for i := range order {
			order[i] = i
		}
	}
	if !isPermutation(order, len(b.JWEs)) {
		return nil, fmt.Errorf("sss: an order of the shares %v that is not one of %d", order, len(b.JWEs))
	}
	se := &ShareError{T: b.T, Errs: make([]error, len(b.JWEs))}
	var xs, ys []*big.Int
	for n, i := range order {
		if len(xs) == b.T {
			break
		}
		if left := len(order) - n; len(xs)+left < b.T {
			// Too few shares are left to meet the threshold: asking
			// them would only cost (a server's timeout, the TPM).
			se.Unasked = append(se.Unasked, order[n:]...)
			break
		}
		pt, err := recover(ctx, i, b.JWEs[i])
		if err == nil && len(pt) != 2*size {
			err = fmt.Errorf("share of %d bytes, not %d", len(pt), 2*size)
		}
		if err != nil {
			se.Errs[i] = err
			continue
		}
		xs = append(xs, new(big.Int).SetBytes(pt[:size]))
		ys = append(ys, new(big.Int).SetBytes(pt[size:]))
	}
	se.Got = len(xs)
	if len(xs) < b.T {
		return nil, se
	}
	key, err := interpolate(b.p, xs, ys)
	if err != nil {
		return nil, err
	}
	out, err := b.jwe.Decrypt(key.FillBytes(make([]byte, size)))
	if err != nil {
		return nil, fmt.Errorf("sss: %w", err)
	}
	return out, nil
}

func isPermutation(order []int, n int) bool {
	seen := make([]bool, n)
	for _, i := range order {
		if i < 0 || i >= n || seen[i] {
			return false
		}
		seen[i] = true
	}
	return len(order) == n
}

// interpolate is the polynomial through the points at x = 0 (Lagrange).
func interpolate(p *big.Int, xs, ys []*big.Int) (*big.Int, error) {
	sum := new(big.Int)
	for j := range xs {
		num, den := big.NewInt(1), big.NewInt(1)
		for m := range xs {
			if m == j {
				continue
			}
			num.Mul(num, new(big.Int).Neg(xs[m])).Mod(num, p)
			den.Mul(den, new(big.Int).Sub(xs[j], xs[m])).Mod(den, p)
		}
		inv := new(big.Int).ModInverse(den, p)
		if inv == nil {
			return nil, errors.New("sss: two shares have the same x")
		}
		term := num.Mul(num, inv).Mul(num, ys[j])
		sum.Add(sum, term).Mod(sum, p)
	}
	if sum.BitLen() > size*8 {
		return nil, errors.New("sss: the key is larger than the field")
	}
	return sum, nil
}

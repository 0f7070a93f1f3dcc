package tang

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/volumed/volumed/internal/jweheader"
)

// Binding is a parsed Clevis tang JWE (compact serialization): what
// recovery needs from its protected header, and the JWE itself.
type Binding struct {
	URL      string
	KID      string            // the server exchange key's thumbprint
	Signing  []jose.JSONWebKey // the signing keys of the advertisement it was bound with
	exchange *ecdsa.PublicKey  // the server's exchange key (S)
	epk      *ecdsa.PublicKey  // the binder's ephemeral key (C)
	enc      jose.ContentEncryption
	apu, apv []byte
	jwe      *jose.JSONWebEncryption
}

type clevisHeader struct {
	Pin  string           `json:"pin"`
	Tang *clevisTangField `json:"tang,omitempty"`
}

type clevisTangField struct {
	URL string          `json:"url"`
	Adv json.RawMessage `json:"adv"`
}

type protectedHeader struct {
	Alg    string          `json:"alg"`
	Enc    string          `json:"enc"`
	KID    string          `json:"kid"`
	EPK    json.RawMessage `json:"epk"`
	APU    string          `json:"apu"`
	APV    string          `json:"apv"`
	Clevis clevisHeader    `json:"clevis"`
}

// cekSizes are the content encryptions a binding may use, by key size.
var cekSizes = map[jose.ContentEncryption]int{jose.A128GCM: 16, jose.A192GCM: 24, jose.A256GCM: 32}

// ParseBinding reads a Clevis tang JWE. Anything else (another pin, a
// JWE whose header lacks what recovery needs) is an error that says
// what is wrong, wrapping ErrNotTang when it is another pin.
func ParseBinding(compact string) (Binding, error) {
	var h protectedHeader
	if err := jweheader.Decode(compact, &h); err != nil {
		return Binding{}, err
	}
	if h.Clevis.Pin != "tang" || h.Clevis.Tang == nil {
		return Binding{}, fmt.Errorf("JWE pin %q: %w", h.Clevis.Pin, ErrNotTang)
	}
	enc := jose.ContentEncryption(h.Enc)
	if h.Alg != string(jose.ECDH_ES) || cekSizes[enc] == 0 {
		return Binding{}, fmt.Errorf("JWE alg %q enc %q: only ECDH-ES with AES-GCM is a tang binding", h.Alg, h.Enc)
	}
	b := Binding{URL: h.Clevis.Tang.URL, KID: h.KID, enc: enc}
	var err error
	if b.apu, err = base64.RawURLEncoding.DecodeString(h.APU); err != nil {
		return Binding{}, fmt.Errorf("JWE apu: %w", err)
	}
	if b.apv, err = base64.RawURLEncoding.DecodeString(h.APV); err != nil {
		return Binding{}, fmt.Errorf("JWE apv: %w", err)
	}
	if b.epk, err = p521Key(h.EPK); err != nil {
		return Binding{}, fmt.Errorf("JWE epk: %w", err)
	}
	keys, err := parseKeys(h.Clevis.Tang.Adv)
	if err != nil {
		return Binding{}, fmt.Errorf("JWE clevis.tang.adv: %w", err)
	}
	b.Signing, _ = keys.with("verify")
	exch, _ := keys.with("deriveKey")
	i := slices.IndexFunc(exch, func(k jose.JSONWebKey) bool { return Matches(k, h.KID) })
	if i < 0 {
		return Binding{}, fmt.Errorf("JWE kid %q is none of the exchange keys of clevis.tang.adv", h.KID)
	}
	if b.exchange, err = p521Public(exch[i]); err != nil {
		return Binding{}, fmt.Errorf("JWE clevis.tang.adv exchange key: %w", err)
	}
	if b.jwe, err = jose.ParseEncryptedCompact(compact, []jose.KeyAlgorithm{jose.ECDH_ES}, []jose.ContentEncryption{enc}); err != nil {
		return Binding{}, fmt.Errorf("JWE: %w", err)
	}
	return b, nil
}

// PinnedBy reports whether the binding was made with the advertisement
// of the server whose signing key has thumbprint thp.
func (b Binding) PinnedBy(thp string) bool {
	return slices.ContainsFunc(b.Signing, func(k jose.JSONWebKey) bool { return Matches(k, thp) })
}

func p521Key(raw json.RawMessage) (*ecdsa.PublicKey, error) {
	var k jose.JSONWebKey
	if err := k.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	return p521Public(k)
}

func p521Public(k jose.JSONWebKey) (*ecdsa.PublicKey, error) {
	pub, ok := k.Key.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%T, not an EC public key", k.Key)
	}
	if pub.Curve != elliptic.P521() {
		return nil, fmt.Errorf("curve %s: only P-521 (what tangd-keygen makes) is supported", pub.Curve.Params().Name)
	}
	return pub, nil
}

// Bind encrypts plaintext to the server's exchange key after verifying
// its advertisement against the pinned thumbprint, and returns the JWE
// in compact serialization with the protected header Clevis writes
// (clevis.pin, clevis.tang.url and .adv, kid), so `clevis decrypt`
// recovers it.
func (s Server) Bind(ctx context.Context, plaintext []byte) (string, error) {
	adv, err := s.Advertise(ctx)
	if err != nil {
		return "", err
	}
	pub, err := p521Public(adv.Exchange)
	if err != nil {
		return "", fmt.Errorf("tang server %s: exchange key: %w", s.URL, err)
	}
	opts := (&jose.EncrypterOptions{}).WithHeader("clevis", clevisHeader{Pin: "tang", Tang: &clevisTangField{URL: s.URL, Adv: adv.JWKS}})
	enc, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.ECDH_ES, Key: pub, KeyID: adv.KID}, opts)
	if err != nil {
		return "", fmt.Errorf("tang bind: %w", err)
	}
	obj, err := enc.Encrypt(plaintext)
	if err != nil {
		return "", fmt.Errorf("tang bind: %w", err)
	}
	return obj.CompactSerialize()
}

// Recover recovers a binding's plaintext with the server's help, after
// verifying its advertisement against the pinned thumbprint and that
// the binding was made with the same server's advertisement. The server
// sees only a blinded point.
func (s Server) Recover(ctx context.Context, b Binding) ([]byte, error) {
	if !b.PinnedBy(s.Thumbprint) {
		var thps []string
		for _, k := range b.Signing {
			if t, err := Thumbprint(k); err == nil {
				thps = append(thps, t)
			}
		}
		return nil, &KeyChangedError{URL: b.URL, Pinned: s.Thumbprint, Served: thps}
	}
	if _, err := s.Advertise(ctx); err != nil {
		return nil, err
	}
	x, e, err := blind(b.epk)
	if err != nil {
		return nil, fmt.Errorf("tang recover: %w", err)
	}
	req, err := json.Marshal(ecmrJWK(x))
	if err != nil {
		return nil, fmt.Errorf("tang recover: %w", err)
	}
	body, err := s.do(ctx, "POST", "/rec/"+b.KID, req)
	if err != nil {
		return nil, err
	}
	y, err := p521Key(body)
	if err != nil {
		return nil, fmt.Errorf("tang server %s: answer to /rec: %w", s.URL, err)
	}
	zx, err := unblind(y, b.exchange, e)
	if err != nil {
		return nil, fmt.Errorf("tang server %s: answer to /rec: %w", s.URL, err)
	}
	cek := concatKDF(zx, string(b.enc), b.apu, b.apv, cekSizes[b.enc])
	out, err := b.jwe.Decrypt(cekKey(cek))
	if err != nil {
		return nil, fmt.Errorf("tang recover: %w", err)
	}
	return out, nil
}

// cekKey hands go-jose the content key the exchange derived: the JWE's
// alg is ECDH-ES, whose private half no one holds.
type cekKey []byte

func (k cekKey) DecryptKey([]byte, jose.Header) ([]byte, error) { return k, nil }

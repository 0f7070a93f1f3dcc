// Package tang binds a secret to a Tang key server and recovers it, as
// Clevis' tang pin does: the McCallum–Relyea exchange over HTTP (GET
// /adv, POST /rec/<kid>), the secret in a JWE whose protected header
// carries the server's URL and advertisement. The server never sees the
// secret, and the client keeps nothing that recovers it without the
// server.
//
// The server's signing key is pinned by its thumbprint: an advertisement
// that key did not sign is refused, at binding and at every recovery.
package tang

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// DefaultTimeout bounds each HTTP request to a server: one server that
// does not answer holds up only the volume that waits for it, and only
// this long per attempt.
const DefaultTimeout = 10 * time.Second

// maxBody bounds what is read of a server's answer: an advertisement
// of a few keys is a few KiB.
const maxBody = 1 << 20

// Server is one Tang server and the thumbprint of its signing key.
type Server struct {
	URL        string // e.g. http://tang.example:7500
	Thumbprint string // the signing key's JWK thumbprint (SHA-256, or SHA-1 as Clevis still accepts), base64url
	// HTTP, when set, makes the requests (tests, a proxy); its Timeout
	// is kept if set, else DefaultTimeout bounds each request.
	HTTP *http.Client
}

// UnreachableError is a server that did not answer (or not with an
// answer): the caller waits and tries again.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string { return fmt.Sprintf("tang server %s: %v", e.URL, e.Err) }
func (e *UnreachableError) Unwrap() error { return e.Err }

// KeyChangedError is an advertisement not signed by the pinned key: the
// server's key was rotated or it is another server. Nothing is sent to it.
type KeyChangedError struct {
	URL    string
	Pinned string
	Served []string // the thumbprints of the signing keys it advertises
}

func (e *KeyChangedError) Error() string {
	return fmt.Sprintf("tang server %s: its signing key is %s, not the pinned %s: refused (pin the new thumbprint if the server's key was rotated on purpose)",
		e.URL, strings.Join(e.Served, ", "), e.Pinned)
}

// Advertisement is a server's verified advertisement.
type Advertisement struct {
	// JWKS is the payload as served ({"keys": [...]}): Clevis copies it
	// into the JWE header, and so does Bind.
	JWKS     json.RawMessage
	Exchange jose.JSONWebKey // the key to bind to (alg ECMR, deriveKey)
	KID      string          // Exchange's SHA-256 thumbprint: the path of its /rec
}

// advKey is the fields of an advertised key that say what it is for.
type advKey struct {
	Alg    string   `json:"alg"`
	KeyOps []string `json:"key_ops"`
}

type jwks struct {
	Keys []json.RawMessage `json:"keys"`
}

func (s Server) client() *http.Client {
	if s.HTTP != nil {
		if s.HTTP.Timeout == 0 {
			c := *s.HTTP
			c.Timeout = DefaultTimeout
			return &c
		}
		return s.HTTP
	}
	return &http.Client{Timeout: DefaultTimeout}
}

func (s Server) endpoint(path string) string {
	return strings.TrimRight(s.URL, "/") + path
}

// do sends one request and returns the body of a 200 answer; anything
// else is an UnreachableError.
func (s Server) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, s.endpoint(path), rd)
	if err != nil {
		return nil, fmt.Errorf("tang server %s: %w", s.URL, err)
	}
	// tangd, run per connection by inetd or systemd, answers one
	// request and waits on a kept-alive connection.
	req.Close = true
	if body != nil {
		req.Header.Set("Content-Type", "application/jwk+json")
	}
	resp, err := s.client().Do(req)
	if err != nil {
		return nil, &UnreachableError{URL: s.URL, Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, &UnreachableError{URL: s.URL, Err: fmt.Errorf("%s %s: %w", method, path, err)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &UnreachableError{URL: s.URL, Err: fmt.Errorf("%s %s: %s", method, path, resp.Status)}
	}
	return b, nil
}

// Advertise fetches the server's advertisement and verifies that the
// pinned key signed it.
func (s Server) Advertise(ctx context.Context) (Advertisement, error) {
	if s.Thumbprint == "" {
		return Advertisement{}, fmt.Errorf("tang server %s: no thumbprint pinned: refused (its signing key's thumbprint is what `tang-show-keys` prints on the server)", s.URL)
	}
	body, err := s.do(ctx, http.MethodGet, "/adv", nil)
	if err != nil {
		return Advertisement{}, err
	}
	return VerifyAdvertisement(s.URL, s.Thumbprint, body)
}

// VerifyAdvertisement checks an advertisement (a JWS in JSON
// serialization) against the pinned signing key's thumbprint and picks
// its exchange key.
func VerifyAdvertisement(url, pinned string, body []byte) (Advertisement, error) {
	sig, err := jose.ParseSignedJSON(string(body), []jose.SignatureAlgorithm{jose.ES512, jose.ES384, jose.ES256})
	if err != nil {
		return Advertisement{}, fmt.Errorf("tang server %s: advertisement: %w", url, err)
	}
	payload := sig.UnsafePayloadWithoutVerification()
	keys, err := parseKeys(payload)
	if err != nil {
		return Advertisement{}, fmt.Errorf("tang server %s: advertisement: %w", url, err)
	}
	verify, served := keys.with("verify")
	i := slices.IndexFunc(verify, func(k jose.JSONWebKey) bool { return Matches(k, pinned) })
	if i < 0 {
		return Advertisement{}, &KeyChangedError{URL: url, Pinned: pinned, Served: served}
	}
	if _, _, _, err := sig.VerifyMulti(verify[i].Key); err != nil {
		return Advertisement{}, fmt.Errorf("tang server %s: advertisement not signed by the pinned key %s: %w", url, pinned, err)
	}
	exch, _ := keys.with("deriveKey")
	if len(exch) == 0 {
		return Advertisement{}, fmt.Errorf("tang server %s: advertisement has no exchange (deriveKey) key", url)
	}
	if _, ok := exch[0].Key.(*ecdsa.PublicKey); !ok {
		return Advertisement{}, fmt.Errorf("tang server %s: exchange key is %T, not an EC public key", url, exch[0].Key)
	}
	kid, err := Thumbprint(exch[0])
	if err != nil {
		return Advertisement{}, fmt.Errorf("tang server %s: %w", url, err)
	}
	return Advertisement{JWKS: payload, Exchange: exch[0], KID: kid}, nil
}

// keySet is an advertisement's keys, each with what it is for.
type keySet struct {
	jwk []jose.JSONWebKey
	ops [][]string
	alg []string
}

func parseKeys(payload []byte) (keySet, error) {
	var set jwks
	if err := json.Unmarshal(payload, &set); err != nil {
		return keySet{}, fmt.Errorf("keys: %w", err)
	}
	var ks keySet
	for i, raw := range set.Keys {
		var meta advKey
		var k jose.JSONWebKey
		if err := json.Unmarshal(raw, &meta); err != nil {
			return keySet{}, fmt.Errorf("keys[%d]: %w", i, err)
		}
		if err := k.UnmarshalJSON(raw); err != nil {
			return keySet{}, fmt.Errorf("keys[%d]: %w", i, err)
		}
		if !k.IsPublic() {
			return keySet{}, fmt.Errorf("keys[%d]: not a public key", i)
		}
		ks.jwk = append(ks.jwk, k)
		ks.ops = append(ks.ops, meta.KeyOps)
		ks.alg = append(ks.alg, meta.Alg)
	}
	return ks, nil
}

// with returns the keys for op (key_ops, or the alg Tang gives such a
// key: ES512 signs, ECMR exchanges) and their SHA-256 thumbprints.
func (ks keySet) with(op string) ([]jose.JSONWebKey, []string) {
	var out []jose.JSONWebKey
	var thps []string
	for i, k := range ks.jwk {
		ok := slices.Contains(ks.ops[i], op)
		if len(ks.ops[i]) == 0 {
			ok = (op == "deriveKey") == (ks.alg[i] == "ECMR")
		}
		if !ok {
			continue
		}
		out = append(out, k)
		if t, err := Thumbprint(k); err == nil {
			thps = append(thps, t)
		}
	}
	return out, thps
}

// Thumbprint is a key's RFC 7638 SHA-256 thumbprint, base64url: what
// `jose jwk thp` and `tang-show-keys` print.
func Thumbprint(k jose.JSONWebKey) (string, error) {
	b, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("thumbprint: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Matches reports whether thp is k's thumbprint, in SHA-256 or in the
// SHA-1 that older Clevis bindings use.
func Matches(k jose.JSONWebKey, thp string) bool {
	for _, h := range []crypto.Hash{crypto.SHA256, crypto.SHA1} {
		b, err := k.Thumbprint(h)
		if err == nil && base64.RawURLEncoding.EncodeToString(b) == thp {
			return true
		}
	}
	return false
}

// ErrNotTang: a JWE that is not a Clevis tang binding.
var ErrNotTang = errors.New("not a clevis tang binding")

// Package tpm2pin is Clevis' tpm2 pin: a random content key (a JWK) sealed
// by the TPM2 to PCR values, and the plaintext encrypted with it. The JWE
// is Clevis' own (alg dir, enc A256GCM, protected header clevis.tpm2 with
// hash, key, pcr_bank, pcr_ids, jwk_pub and jwk_priv, the sealed object's
// TPM2B_PUBLIC and TPM2B_PRIVATE), so `clevis decrypt` opens what Bind
// makes and Parse reads what `clevis encrypt tpm2` makes, alone or as a
// share of Clevis' sss pin.
//
// The sealing is drivers/tpm2's: an object under the owner's primary ECC
// key that tpm2-tools' `tpm2_createprimary -g sha256 -G ecc` makes too,
// bound by PolicyPCR over the sha256 bank.
package tpm2pin

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/volumed/volumed/drivers/tpm2"
	"github.com/volumed/volumed/internal/jweheader"
)

// The primary key and PCR bank this package seals with and can unseal
// under: Clevis' defaults for hash and key, and the bank drivers/tpm2
// reads (Clevis' default bank, sha1, must be named in its config).
const (
	Hash = "sha256"
	Key  = "ecc"
	Bank = tpm2.Bank
)

// ErrNotTPM2: a JWE of another pin.
var ErrNotTPM2 = errors.New("not a clevis tpm2 binding")

type clevisHeader struct {
	Pin  string       `json:"pin"`
	TPM2 *clevisField `json:"tpm2,omitempty"`
}

type clevisField struct {
	Hash    string `json:"hash"`
	Key     string `json:"key"`
	PCRBank string `json:"pcr_bank,omitempty"`
	PCRIDs  string `json:"pcr_ids,omitempty"`
	JWKPub  string `json:"jwk_pub"`
	JWKPriv string `json:"jwk_priv"`
}

// Sealer seals a secret to the current values of PCRs (a *tpm2.TPM).
type Sealer interface {
	Seal(secret []byte, pcrs []int) (tpm2.Sealed, error)
}

// Unsealer unseals what a Sealer sealed (a *tpm2.TPM).
type Unsealer interface {
	Unseal(s tpm2.Sealed) ([]byte, error)
}

// jwk is the content key as Clevis seals it: the JSON of a symmetric
// JWK (what `jose jwk gen -i '{"alg":"A256GCM"}'` prints, less key_ops).
type jwk struct {
	Alg string `json:"alg"`
	K   string `json:"k"`
	Kty string `json:"kty"`
}

// Bind encrypts plaintext with a new content key that the TPM seals to
// the current sha256 values of pcrs, and returns Clevis' tpm2 JWE in
// compact serialization.
func Bind(s Sealer, pcrs []int, plaintext []byte) (string, error) {
	if err := tpm2.CheckPCRs(pcrs); err != nil {
		return "", fmt.Errorf("clevis tpm2: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	js, err := json.Marshal(jwk{Alg: string(jose.A256GCM), K: base64.RawURLEncoding.EncodeToString(key), Kty: "oct"})
	if err != nil {
		return "", err
	}
	sealed, err := s.Seal(js, pcrs)
	if err != nil {
		return "", fmt.Errorf("clevis tpm2: %w", err)
	}
	priv, pub, err := tpm2.SplitBlob(sealed.Blob)
	if err != nil {
		return "", fmt.Errorf("clevis tpm2: %w", err)
	}
	f := clevisField{
		Hash: Hash, Key: Key, PCRBank: Bank, PCRIDs: joinIDs(sealed.PCRs),
		JWKPub:  base64.RawURLEncoding.EncodeToString(pub),
		JWKPriv: base64.RawURLEncoding.EncodeToString(priv),
	}
	opts := (&jose.EncrypterOptions{}).WithHeader("clevis", clevisHeader{Pin: "tpm2", TPM2: &f})
	enc, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.DIRECT, Key: key}, opts)
	if err != nil {
		return "", fmt.Errorf("clevis tpm2: %w", err)
	}
	obj, err := enc.Encrypt(plaintext)
	if err != nil {
		return "", fmt.Errorf("clevis tpm2: %w", err)
	}
	return obj.CompactSerialize()
}

// joinIDs writes PCRs as Clevis' pcr_ids: "7,11".
func joinIDs(pcrs []int) string {
	s := make([]string, len(pcrs))
	for i, p := range pcrs {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// Binding is a parsed Clevis tpm2 JWE.
type Binding struct {
	PCRs   []int       // sorted, sha256 bank
	Sealed tpm2.Sealed // the sealed content key; nothing in it is secret
	jwe    *jose.JSONWebEncryption
}

// Parse reads a Clevis tpm2 JWE in compact serialization. A JWE of
// another pin is ErrNotTPM2; a tpm2 one this package cannot unseal (a
// primary key of another hash or algorithm, the sha1 bank, no PCR
// policy) is an error that says so.
func Parse(compact string) (Binding, error) {
	var h struct {
		Clevis clevisHeader `json:"clevis"`
	}
	if err := jweheader.Decode(compact, &h); err != nil {
		return Binding{}, err
	}
	if h.Clevis.Pin != "tpm2" || h.Clevis.TPM2 == nil {
		return Binding{}, fmt.Errorf("JWE pin %q: %w", h.Clevis.Pin, ErrNotTPM2)
	}
	f := h.Clevis.TPM2
	switch {
	case f.Hash != Hash || f.Key != Key:
		return Binding{}, fmt.Errorf("clevis.tpm2: a primary key of hash %q key %q: only %s %s (Clevis' default) is supported", f.Hash, f.Key, Hash, Key)
	case f.PCRIDs == "":
		return Binding{}, errors.New("clevis.tpm2: no pcr_ids: an object sealed to no PCRs is not supported (a tpm2 key names its PCRs)")
	case f.PCRBank != Bank:
		return Binding{}, fmt.Errorf("clevis.tpm2.pcr_bank %q: only %s is supported (bind with {\"pcr_bank\":\"sha256\"})", f.PCRBank, Bank)
	}
	b := Binding{}
	var err error
	if b.PCRs, err = ParseIDs(f.PCRIDs); err != nil {
		return Binding{}, fmt.Errorf("clevis.tpm2.pcr_ids: %w", err)
	}
	pub, err := base64.RawURLEncoding.DecodeString(f.JWKPub)
	if err != nil {
		return Binding{}, fmt.Errorf("clevis.tpm2.jwk_pub: %w", err)
	}
	priv, err := base64.RawURLEncoding.DecodeString(f.JWKPriv)
	if err != nil {
		return Binding{}, fmt.Errorf("clevis.tpm2.jwk_priv: %w", err)
	}
	b.Sealed = tpm2.Sealed{Blob: append(priv, pub...), PCRs: b.PCRs}
	if err := tpm2.CheckBlob(b.Sealed.Blob); err != nil {
		return Binding{}, fmt.Errorf("clevis.tpm2 jwk_priv and jwk_pub: %w", err)
	}
	if b.jwe, err = jose.ParseEncryptedCompact(compact, []jose.KeyAlgorithm{jose.DIRECT}, []jose.ContentEncryption{jose.A256GCM}); err != nil {
		return Binding{}, fmt.Errorf("JWE: %w", err)
	}
	return b, nil
}

// ParseIDs reads Clevis' pcr_ids ("7,11"): sorted, each once, 0 to 23.
func ParseIDs(s string) ([]int, error) {
	var pcrs []int
	for f := range strings.SplitSeq(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a list of PCR numbers", s)
		}
		pcrs = append(pcrs, p)
	}
	if err := tpm2.CheckPCRs(pcrs); err != nil {
		return nil, err
	}
	slices.Sort(pcrs)
	return pcrs, nil
}

// Recover unseals the content key with the TPM (which refuses while
// the PCRs differ from the sealed values: errors.Is tpm2.ErrPolicy) and
// decrypts the plaintext with it.
func (b Binding) Recover(u Unsealer) ([]byte, error) {
	js, err := u.Unseal(b.Sealed)
	if err != nil {
		return nil, fmt.Errorf("clevis tpm2: %w", err)
	}
	var k jwk
	// Clevis seals the JWK with a newline after it.
	if err := json.Unmarshal(bytes.TrimSpace(js), &k); err != nil || k.Kty != "oct" {
		return nil, errors.New("clevis tpm2: the unsealed content key is not a symmetric JWK")
	}
	key, err := base64.RawURLEncoding.DecodeString(k.K)
	if err != nil || len(key) != 32 {
		return nil, errors.New("clevis tpm2: the unsealed content key is not 32 base64url bytes")
	}
	out, err := b.jwe.Decrypt(key)
	if err != nil {
		return nil, fmt.Errorf("clevis tpm2: %w", err)
	}
	return out, nil
}

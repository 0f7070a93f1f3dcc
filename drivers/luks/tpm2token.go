package luks

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/volumed/volumed/drivers/tpm2"
)

// TokenTPM2 is the token type systemd-cryptenroll writes for a TPM2 key,
// and the one volumed writes: systemd-cryptsetup opens volumed's volumes
// and volumed opens systemd's (those sealed the same way: sha256 PCRs, no
// PIN, no signed policy, no persistent SRK).
const TokenTPM2 = "systemd-tpm2"

// TPM2Token is a systemd-tpm2 token: a sealed secret and the keyslots
// whose passphrase is that secret, base64-encoded.
type TPM2Token struct {
	Keyslots []int
	Sealed   tpm2.Sealed
}

// tpm2TokenJSON is systemd's field set (src/shared/tpm2-util.c,
// tpm2_make_luks2_json), plus volumed_pcr_values: the PCR values at
// sealing, which say which PCR changed when the policy no longer
// matches. systemd ignores fields it does not know, and asks new ones
// to use "_".
type tpm2TokenJSON struct {
	Type       string            `json:"type"`
	Keyslots   []string          `json:"keyslots"`
	Blob       string            `json:"tpm2-blob"`
	PCRs       []int             `json:"tpm2-pcrs"`
	Bank       string            `json:"tpm2-pcr-bank,omitempty"`
	PrimaryAlg string            `json:"tpm2-primary-alg,omitempty"`
	PolicyHash string            `json:"tpm2-policy-hash"`
	PIN        bool              `json:"tpm2-pin"`
	PCRValues  map[string]string `json:"volumed_pcr_values,omitempty"`
	// What volumed does not handle, read only to refuse it clearly.
	SRK        *string `json:"tpm2_srk,omitempty"`
	PubkeyPCRs []int   `json:"tpm2_pubkey_pcrs,omitempty"`
	PCRLock    bool    `json:"tpm2_pcrlock,omitempty"`
}

// MarshalJSON writes the token as `cryptsetup token import` takes it.
func (t TPM2Token) MarshalJSON() ([]byte, error) {
	j := tpm2TokenJSON{
		Type:       TokenTPM2,
		Keyslots:   []string{},
		Blob:       base64.StdEncoding.EncodeToString(t.Sealed.Blob),
		PCRs:       t.Sealed.PCRs,
		Bank:       tpm2.Bank,
		PrimaryAlg: tpm2.PrimaryAlg,
		PolicyHash: hex.EncodeToString(t.Sealed.PolicyHash),
	}
	for _, k := range t.Keyslots {
		j.Keyslots = append(j.Keyslots, strconv.Itoa(k))
	}
	if len(t.Sealed.PCRValues) > 0 {
		j.PCRValues = map[string]string{}
		for p, v := range t.Sealed.PCRValues {
			j.PCRValues[strconv.Itoa(p)] = hex.EncodeToString(v)
		}
	}
	return json.Marshal(j)
}

// ParseTPM2Token reads a systemd-tpm2 token's JSON object. A token that
// volumed cannot unseal (a PIN, a signed or pcrlock policy, the sha1
// bank, an RSA or persistent primary key) is an error that says so.
func ParseTPM2Token(js []byte) (TPM2Token, error) {
	var j tpm2TokenJSON
	if err := json.Unmarshal(js, &j); err != nil {
		return TPM2Token{}, fmt.Errorf("token JSON: %w", err)
	}
	if j.Type != TokenTPM2 {
		return TPM2Token{}, fmt.Errorf("token type %q, not %s", j.Type, TokenTPM2)
	}
	var t TPM2Token
	for _, k := range j.Keyslots {
		n, err := strconv.Atoi(k)
		if err != nil || n < 0 || n > 31 {
			return TPM2Token{}, fmt.Errorf("keyslots: %q is not a keyslot number", k)
		}
		t.Keyslots = append(t.Keyslots, n)
	}
	switch {
	case j.Bank != "" && j.Bank != tpm2.Bank:
		return TPM2Token{}, fmt.Errorf("tpm2-pcr-bank %q: only %s is supported", j.Bank, tpm2.Bank)
	case j.PrimaryAlg != "" && j.PrimaryAlg != tpm2.PrimaryAlg:
		return TPM2Token{}, fmt.Errorf("tpm2-primary-alg %q: only %s is supported", j.PrimaryAlg, tpm2.PrimaryAlg)
	case j.PIN:
		return TPM2Token{}, errors.New("tpm2-pin: the token wants a PIN, which volumed does not ask for")
	case j.SRK != nil:
		return TPM2Token{}, errors.New("tpm2_srk: sealed under a persistent SRK (systemd 255 and later), not supported")
	case len(j.PubkeyPCRs) > 0:
		return TPM2Token{}, errors.New("tpm2_pubkey_pcrs: a signed PCR policy, not supported")
	case j.PCRLock:
		return TPM2Token{}, errors.New("tpm2_pcrlock: a pcrlock policy, not supported")
	}
	if err := tpm2.CheckPCRs(j.PCRs); err != nil {
		return TPM2Token{}, fmt.Errorf("tpm2-pcrs: %w", err)
	}
	t.Sealed.PCRs = slices.Sorted(slices.Values(j.PCRs))
	var err error
	if t.Sealed.Blob, err = base64.StdEncoding.DecodeString(j.Blob); err != nil {
		return TPM2Token{}, fmt.Errorf("tpm2-blob: %w", err)
	}
	if err := tpm2.CheckBlob(t.Sealed.Blob); err != nil {
		return TPM2Token{}, err
	}
	if t.Sealed.PolicyHash, err = hex.DecodeString(j.PolicyHash); err != nil {
		return TPM2Token{}, fmt.Errorf("tpm2-policy-hash: %w", err)
	}
	if n := len(t.Sealed.PolicyHash); n != 0 && n != 32 {
		return TPM2Token{}, fmt.Errorf("tpm2-policy-hash: %d bytes, not a sha256 digest", n)
	}
	for p, v := range j.PCRValues {
		n, err := strconv.Atoi(p)
		b, herr := hex.DecodeString(v)
		if err != nil || herr != nil || !slices.Contains(t.Sealed.PCRs, n) || len(b) != 32 {
			// Only a hint for the error message: ignore what is off.
			continue
		}
		if t.Sealed.PCRValues == nil {
			t.Sealed.PCRValues = map[int][]byte{}
		}
		t.Sealed.PCRValues[n] = b
	}
	return t, nil
}

// tpm2Passphrase is what systemd enrols in the keyslot for a sealed
// secret: the secret in base64 (systemd's base64mem: standard alphabet,
// padded, no line breaks).
func tpm2Passphrase(secret []byte) []byte {
	return []byte(base64.StdEncoding.EncodeToString(secret))
}

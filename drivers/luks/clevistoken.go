package luks

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// TokenClevis is the token type `clevis luks bind` writes on LUKS2, and
// the one volumed writes for a Tang key: `clevis luks unlock` opens
// volumed's volumes and volumed opens Clevis' tang bindings.
const TokenClevis = "clevis"

// ClevisToken is a clevis token: a JWE whose plaintext is the passphrase
// of the keyslots it names.
type ClevisToken struct {
	Keyslots []int
	JWE      string // compact serialization
}

// clevisJWE is the JWE in the flattened JSON serialization, as `jose jwe
// fmt` turns Clevis' compact one into the token's jwe field.
type clevisJWE struct {
	Ciphertext   string `json:"ciphertext"`
	EncryptedKey string `json:"encrypted_key"`
	IV           string `json:"iv"`
	Protected    string `json:"protected"`
	Tag          string `json:"tag"`
}

type clevisTokenJSON struct {
	Type     string    `json:"type"`
	Keyslots []string  `json:"keyslots"`
	JWE      clevisJWE `json:"jwe"`
}

// MarshalJSON writes the token as `clevis luks bind` does (clevis-luks-
// common-functions: {"type":"clevis","keyslots":[...],"jwe":...}).
func (t ClevisToken) MarshalJSON() ([]byte, error) {
	parts := strings.Split(t.JWE, ".")
	if len(parts) != 5 {
		return nil, fmt.Errorf("clevis token: the JWE has %d parts, not 5", len(parts))
	}
	j := clevisTokenJSON{Type: TokenClevis, Keyslots: []string{}, JWE: clevisJWE{
		Protected: parts[0], EncryptedKey: parts[1], IV: parts[2], Ciphertext: parts[3], Tag: parts[4],
	}}
	for _, k := range t.Keyslots {
		j.Keyslots = append(j.Keyslots, strconv.Itoa(k))
	}
	return json.Marshal(j)
}

// ParseClevisToken reads a clevis token's JSON object.
func ParseClevisToken(js []byte) (ClevisToken, error) {
	var j clevisTokenJSON
	if err := json.Unmarshal(js, &j); err != nil {
		return ClevisToken{}, fmt.Errorf("token JSON: %w", err)
	}
	if j.Type != TokenClevis {
		return ClevisToken{}, fmt.Errorf("token type %q, not %s", j.Type, TokenClevis)
	}
	var t ClevisToken
	for _, k := range j.Keyslots {
		n, err := strconv.Atoi(k)
		if err != nil || n < 0 || n > 31 {
			return ClevisToken{}, fmt.Errorf("keyslots: %q is not a keyslot number", k)
		}
		t.Keyslots = append(t.Keyslots, n)
	}
	w := j.JWE
	for name, part := range map[string]string{"protected": w.Protected, "iv": w.IV, "ciphertext": w.Ciphertext, "tag": w.Tag, "encrypted_key": w.EncryptedKey} {
		if strings.ContainsAny(part, ".\n ") {
			return ClevisToken{}, fmt.Errorf("jwe.%s: not base64url", name)
		}
	}
	if w.Protected == "" || w.Ciphertext == "" {
		return ClevisToken{}, fmt.Errorf("jwe: no protected header or no ciphertext")
	}
	t.JWE = strings.Join([]string{w.Protected, w.EncryptedKey, w.IV, w.Ciphertext, w.Tag}, ".")
	return t, nil
}

// Package jweheader reads the protected header of a JWE in compact
// serialization, where Clevis puts its pin's configuration: the tang, sss
// and tpm2 pins each tell their own by it.
package jweheader

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Decode unmarshals the protected header of compact into v.
func Decode(compact string, v any) error {
	hdr64, _, ok := strings.Cut(compact, ".")
	if !ok {
		return errors.New("JWE: not in compact serialization")
	}
	raw, err := base64.RawURLEncoding.DecodeString(hdr64)
	if err != nil {
		return fmt.Errorf("JWE protected header: %w", err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("JWE protected header: %w", err)
	}
	return nil
}

package luks

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/volumed/volumed/internal/secret"
)

// TokenRecovery is the token type systemd-cryptenroll --recovery-key
// writes to mark a recovery key's keyslot.
const TokenRecovery = "systemd-recovery"

// modhex is the alphabet of systemd's recovery keys (YubiKey's modhex:
// the same keys on most keyboard layouts), a nibble per character.
const modhex = "cbdefghijklnrtuv"

// RecoveryKey is a new recovery key in systemd-cryptenroll's format: 256
// random bits as 64 modhex characters in 8 dash-separated groups of 8.
func RecoveryKey() (secret.Value, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return secret.Value{}, err
	}
	out := make([]byte, 0, 71)
	for i, c := range b {
		if i > 0 && i%4 == 0 {
			out = append(out, '-')
		}
		out = append(out, modhex[c>>4], modhex[c&0xf])
	}
	return secret.FromBytes(out), nil
}

type recoveryToken struct{ keyslot int }

func (t recoveryToken) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"type": TokenRecovery, "keyslots": []string{strconv.Itoa(t.keyslot)}})
}

// AddRecoveryKey enrols a new recovery key in a keyslot of its own,
// opened by the first of keys that opens the header, marks the keyslot
// with a systemd-recovery token, and returns the key for the caller to
// show once: it is kept nowhere. Its keyslot has systemd's KDF for keys
// of full entropy (pbkdf2, 1000 iterations).
//
// A crash between the keyslot and the token leaves a keyslot whose key
// no one was shown; it opens nothing anyone has, and `cryptsetup
// luksKillSlot` frees it.
func (c *Client) AddRecoveryKey(ctx context.Context, device string, keys []Key) (secret.Value, error) {
	in, err := InspectDevice(device)
	if err != nil {
		return secret.Value{}, fmt.Errorf("recovery key for %s: %w", device, err)
	}
	h, ok := in.Best()
	if !ok {
		return secret.Value{}, fmt.Errorf("recovery key for %s: %w", device, ErrNoHeader)
	}
	opener, err := c.opener(ctx, device, h, keys)
	if err != nil {
		return secret.Value{}, fmt.Errorf("recovery key for %s: %w", device, err)
	}
	rk, err := RecoveryKey()
	if err != nil {
		return secret.Value{}, err
	}
	args := append([]string{"luksAddKey", "--batch-mode"}, tpm2PBKDF.args()...)
	args = append(args, "--key-file=/proc/self/fd/3", "--new-keyfile=/proc/self/fd/4", "--", device)
	if _, err := c.run(ctx, args, opener, rk); err != nil {
		return secret.Value{}, fmt.Errorf("recovery key for %s: %w", device, err)
	}
	slot, ok, err := c.slotOf(ctx, device, rk)
	if err != nil || !ok {
		return secret.Value{}, fmt.Errorf("recovery key for %s: the keyslot just added does not open: %v", device, err)
	}
	id := 0
	for slices.ContainsFunc(h.TokenObjects, func(t Token) bool { return t.ID == id }) {
		id++
	}
	if err := c.importToken(ctx, device, id, recoveryToken{slot}, false); err != nil {
		return secret.Value{}, fmt.Errorf("recovery key for %s: %w", device, err)
	}
	return rk, nil
}

// opener is the passphrase of the first key that opens the header, or a
// LockedError with each key's reason.
func (c *Client) opener(ctx context.Context, device string, h Header, keys []Key) (secret.Value, error) {
	locked := &LockedError{Device: device, Tokens: h.Tokens}
	for _, i := range tryOrder(keys) {
		k := keys[i]
		offs, err := offers(ctx, k, h)
		if err != nil {
			locked.Failures = append(locked.Failures, keyFailure(i, k, err))
			continue
		}
		for _, v := range offs {
			ok, err := c.checkKey(ctx, device, v)
			if err != nil {
				return secret.Value{}, err
			}
			if ok {
				return v, nil
			}
		}
		locked.Failures = append(locked.Failures, KeyFailure{Key: i, Desc: k.Describe(), Reason: "does not match any keyslot"})
	}
	return secret.Value{}, locked
}

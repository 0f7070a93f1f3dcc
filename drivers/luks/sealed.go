package luks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/volumed/volumed/internal/secret"
)

// ErrSealedKey: a TPM2 or Tang key has no material of its own; its
// secret is sealed in a token of the LUKS2 header, which Format writes
// and Open, Format and CheckKey read.
var ErrSealedKey = errors.New("the key's secret is sealed in the LUKS2 header, not readable on its own")

// tokenFor is a sealed secret's token, bound to the keyslots given.
type tokenFor func(keyslots []int) json.Marshaler

// enrolledToken is a token of the header whose secret a key recovers.
type enrolledToken struct {
	ID    int
	Token tokenFor
	Pass  secret.Value
}

// sealedKey is a key whose secret lives in a token of the header: a
// TPM2 key (systemd-tpm2 token) or a Tang key (clevis token).
type sealedKey interface {
	Key
	// usable checks, before Format touches a device, that the key can
	// seal (its TPM answers, its server is the pinned one).
	usable(ctx context.Context) error
	// unsealTokens returns the passphrases of the header's tokens this
	// key recovers, or why there is none.
	unsealTokens(ctx context.Context, h Header) ([]secret.Value, error)
	// seal makes a new random secret and its token.
	seal(ctx context.Context) (tokenFor, secret.Value, error)
	// enrolled finds a token of this key's making that it recovers.
	enrolled(ctx context.Context, h Header) (enrolledToken, bool, error)
}

// offers returns the passphrases a key offers for header h: a file key's
// content, or what a sealed key recovers from the header's tokens.
func offers(ctx context.Context, k Key, h Header) ([]secret.Value, error) {
	if sk, ok := k.(sealedKey); ok {
		return sk.unsealTokens(ctx, h)
	}
	v, err := k.Material(ctx)
	if err != nil {
		return nil, err
	}
	return []secret.Value{v}, nil
}

// formatSealedFirst is Format's luksFormat when every key is sealed:
// the header's first keyslot is the first key's, and its token is
// imported right after. A crash between the two leaves a header nothing
// can open; sealedTorn recognises it and Format redoes it.
func (c *Client) formatSealedFirst(ctx context.Context, o FormatOptions, k sealedKey, args []string) (secret.Value, error) {
	tok, pass, err := k.seal(ctx)
	if err != nil {
		return secret.Value{}, fmt.Errorf("luks format %s: key 0 (%s): %w", o.Device, k.Describe(), err)
	}
	args = append(args, tpm2PBKDF.args()...)
	args = append(args, "--key-slot=0", "--key-file=/proc/self/fd/3", "--", o.Device)
	if _, err := c.run(ctx, args, pass); err != nil {
		return secret.Value{}, fmt.Errorf("luks format %s: %w", o.Device, err)
	}
	if err := c.importToken(ctx, o.Device, 0, tok([]int{0}), false); err != nil {
		return secret.Value{}, fmt.Errorf("luks format %s: key 0 (%s): %w", o.Device, k.Describe(), err)
	}
	return pass, nil
}

// sealedTorn reports the one whole header of this intent that Format
// may write again: every key is sealed, and the header has its first
// keyslot but no token (the crash came between luksFormat and the token
// import), so the sealed secret is lost and nothing can open it or can
// have written through it.
func sealedTorn(h Header, o FormatOptions) bool {
	if h.UUID != o.UUID || h.Keyslots != 1 || len(h.Tokens) != 0 {
		return false
	}
	for _, k := range o.Keys {
		if _, ok := k.(sealedKey); !ok {
			return false
		}
	}
	return true
}

// enrolSealed makes k open the header on device, given a passphrase
// that opens it. It converges from any crash:
//
//  1. a token of k's that k recovers and whose passphrase opens a
//     keyslot the token names: done;
//  2. such a token whose passphrase opens another keyslot or none (a
//     crash after the token import or after the luksAddKey): add the
//     keyslot if missing and bind the token to it;
//  3. none: seal a new secret, import its token bound to no keyslot yet,
//     add the keyslot, bind the token to it.
//
// The token goes in before its keyslot, so no crash leaves a keyslot
// whose secret is lost.
func (c *Client) enrolSealed(ctx context.Context, device string, k sealedKey, opener secret.Value) error {
	in, err := InspectDevice(device)
	if err != nil {
		return err
	}
	h, ok := in.Best()
	if !ok {
		return fmt.Errorf("no whole LUKS2 header: %w", ErrNoHeader)
	}
	e, found, err := k.enrolled(ctx, h)
	if err != nil {
		return err
	}
	if found {
		return c.bindToken(ctx, device, e, opener)
	}
	tok, pass, err := k.seal(ctx)
	if err != nil {
		return err
	}
	id := 0
	for slices.ContainsFunc(h.TokenObjects, func(t Token) bool { return t.ID == id }) {
		id++
	}
	if err := c.importToken(ctx, device, id, tok(nil), false); err != nil {
		return err
	}
	return c.bindToken(ctx, device, enrolledToken{ID: id, Token: tok, Pass: pass}, opener)
}

// bindToken adds a keyslot for e's passphrase unless one opens already,
// and binds token e.ID to it.
func (c *Client) bindToken(ctx context.Context, device string, e enrolledToken, opener secret.Value) error {
	slot, ok, err := c.slotOf(ctx, device, e.Pass)
	if err != nil {
		return err
	}
	if !ok {
		args := append([]string{"luksAddKey", "--batch-mode"}, tpm2PBKDF.args()...)
		args = append(args, "--key-file=/proc/self/fd/3", "--new-keyfile=/proc/self/fd/4", "--", device)
		if _, err := c.run(ctx, args, opener, e.Pass); err != nil {
			return err
		}
		if slot, ok, err = c.slotOf(ctx, device, e.Pass); err != nil || !ok {
			return fmt.Errorf("the keyslot just added does not open: %v", err)
		}
	}
	in, err := InspectDevice(device)
	if err != nil {
		return err
	}
	if h, ok := in.Best(); ok {
		for _, t := range h.TokenObjects {
			if t.ID == e.ID && slices.Equal(t.Keyslots, []int{slot}) {
				return nil
			}
		}
	}
	return c.importToken(ctx, device, e.ID, e.Token([]int{slot}), true)
}

var slotUnlocked = regexp.MustCompile(`Key slot (\d+) unlocked`)

// slotOf reports which keyslot pass opens, if any.
func (c *Client) slotOf(ctx context.Context, device string, pass secret.Value) (int, bool, error) {
	out, code, err := c.runOut(ctx, []string{"open", "--test-passphrase", "--verbose", "--type", "luks2", "--key-file=/proc/self/fd/3", "--", device}, nil, pass)
	if code == exitNoKey {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	m := slotUnlocked.FindStringSubmatch(out)
	if m == nil {
		return 0, false, fmt.Errorf("cryptsetup open --test-passphrase did not say which keyslot opened: %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n, true, nil
}

// importToken writes token id through cryptsetup's stdin (replacing the
// one there when replace is set). A token holds no secret of its own.
func (c *Client) importToken(ctx context.Context, device string, id int, t json.Marshaler, replace bool) error {
	js, err := t.MarshalJSON()
	if err != nil {
		return err
	}
	args := []string{"token", "import", "--json-file", "-", fmt.Sprintf("--token-id=%d", id)}
	if replace {
		args = append(args, "--token-replace")
	}
	args = append(args, "--", device)
	if _, _, err := c.runOut(ctx, args, js); err != nil {
		return fmt.Errorf("import token %d: %w", id, err)
	}
	return nil
}

package luks

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/volumed/volumed/drivers/tpm2"
	"github.com/volumed/volumed/internal/secret"
)

// DefaultTPM is the kernel's TPM2 resource manager, which lets several
// programs use the TPM at once.
const DefaultTPM = tpm2.DefaultDevice

// ErrSealedKey: a TPM2 key has no material of its own; its secret is
// sealed in a token of the LUKS2 header, which Format writes and Open,
// Format and CheckKey read.
var ErrSealedKey = errors.New("a tpm2 key's secret is sealed in the LUKS2 header, not readable on its own")

// TPM2Key is a random volume key sealed by the host's TPM2 to the values
// of PCRs; the sealed blob lives in a systemd-tpm2 token on the LUKS2
// header, so the disk carries what it needs to be opened on this host.
// Device is "" for DefaultTPM, or another TPM device or a software TPM's
// unix socket.
type TPM2Key struct {
	Device string // "" for DefaultTPM
	PCRs   []int
}

func (k TPM2Key) Kind() string { return "tpm2" }

func (k TPM2Key) Describe() string { return "tpm2 pcrs " + tpm2.JoinPCRs(k.PCRs) }

func (k TPM2Key) Material(context.Context) (secret.Value, error) {
	return secret.Value{}, ErrSealedKey
}

// tpm2PBKDF is systemd-cryptenroll's KDF for a keyslot whose passphrase
// is a random secret (cryptsetup_set_minimal_pbkdf): a slow KDF adds
// nothing to 256 random bits.
var tpm2PBKDF = PBKDF{Type: "pbkdf2", Hash: "sha512", Iterations: 1000}

func (k TPM2Key) open(ctx context.Context) (*tpm2.TPM, error) {
	return tpm2.Open(ctx, cmp.Or(k.Device, DefaultTPM))
}

// usable checks, before Format touches a device, that k's PCRs make a
// policy and its TPM answers.
func (k TPM2Key) usable(ctx context.Context) error {
	if err := tpm2.CheckPCRs(k.PCRs); err != nil {
		return err
	}
	t, err := k.open(ctx)
	if err != nil {
		return err
	}
	defer t.Close()
	_, err = t.ReadPCRs(k.PCRs)
	return err
}

// unsealTokens unseals each systemd-tpm2 token of h with this key's TPM
// and returns the passphrases in token order, or why there is none.
func (k TPM2Key) unsealTokens(ctx context.Context, h Header) ([]secret.Value, error) {
	var toks []TPM2Token
	var reasons []string
	for _, t := range h.TokenObjects {
		if t.Type != TokenTPM2 {
			continue
		}
		tt, err := ParseTPM2Token(t.JSON)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("token %d: %v", t.ID, err))
			continue
		}
		toks = append(toks, tt)
	}
	if len(toks) == 0 {
		if len(reasons) > 0 {
			return nil, fmt.Errorf("tpm2: %s", strings.Join(reasons, "; "))
		}
		return nil, errors.New("tpm2: the header carries no systemd-tpm2 token")
	}
	tpm, err := k.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("tpm2: %w", err)
	}
	defer tpm.Close()
	var out []secret.Value
	for _, tt := range toks {
		s, err := tpm.Unseal(tt.Sealed)
		if err != nil {
			reasons = append(reasons, tpm2Reason(err))
			continue
		}
		out = append(out, secret.FromBytes(tpm2Passphrase(s)))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tpm2: %s", strings.Join(reasons, "; "))
	}
	return out, nil
}

// tpm2Reason is an unseal failure for a LockedError: a policy mismatch
// as the PCRs that changed, anything else as it is.
func tpm2Reason(err error) string {
	var pe *tpm2.PolicyError
	if errors.As(err, &pe) {
		return pe.Error()
	}
	return err.Error()
}

// offers returns the passphrases a key offers for header h: a file key's
// content, or what a TPM2 key unseals from the header's tokens.
func offers(ctx context.Context, k Key, h Header) ([]secret.Value, error) {
	if tk, ok := k.(TPM2Key); ok {
		return tk.unsealTokens(ctx, h)
	}
	v, err := k.Material(ctx)
	if err != nil {
		return nil, err
	}
	return []secret.Value{v}, nil
}

// formatTPM2First is Format's luksFormat when every key is a TPM2 key:
// the header's first keyslot is the TPM's, and its token is imported
// right after. A crash between the two leaves a header nothing can open;
// tpm2Torn recognises it and Format redoes it.
func (c *Client) formatTPM2First(ctx context.Context, o FormatOptions, k TPM2Key, args []string) (secret.Value, error) {
	tpm, err := k.open(ctx)
	if err != nil {
		return secret.Value{}, fmt.Errorf("luks format %s: key 0 (%s): %w", o.Device, k.Describe(), err)
	}
	defer tpm.Close()
	sealed, pass, err := seal(tpm, k)
	if err != nil {
		return secret.Value{}, fmt.Errorf("luks format %s: key 0 (%s): %w", o.Device, k.Describe(), err)
	}
	args = append(args, tpm2PBKDF.args()...)
	args = append(args, "--key-slot=0", "--key-file=/proc/self/fd/3", "--", o.Device)
	if _, err := c.run(ctx, args, pass); err != nil {
		return secret.Value{}, fmt.Errorf("luks format %s: %w", o.Device, err)
	}
	if err := c.importToken(ctx, o.Device, 0, TPM2Token{Keyslots: []int{0}, Sealed: sealed}, false); err != nil {
		return secret.Value{}, fmt.Errorf("luks format %s: key 0 (%s): %w", o.Device, k.Describe(), err)
	}
	return pass, nil
}

// tpm2Torn reports the one whole header of this intent that Format may
// write again: every key is a TPM2 key, and the header has its first
// keyslot but no token (the crash came between luksFormat and the token
// import), so the sealed secret is lost and nothing can open it or can
// have written through it.
func tpm2Torn(h Header, o FormatOptions) bool {
	if h.UUID != o.UUID || h.Keyslots != 1 || len(h.Tokens) != 0 {
		return false
	}
	for _, k := range o.Keys {
		if _, ok := k.(TPM2Key); !ok {
			return false
		}
	}
	return true
}

func seal(tpm *tpm2.TPM, k TPM2Key) (tpm2.Sealed, secret.Value, error) {
	s := make([]byte, 32)
	if _, err := rand.Read(s); err != nil {
		return tpm2.Sealed{}, secret.Value{}, err
	}
	sealed, err := tpm.Seal(s, k.PCRs)
	if err != nil {
		return tpm2.Sealed{}, secret.Value{}, err
	}
	return sealed, secret.FromBytes(tpm2Passphrase(s)), nil
}

// enrolTPM2 makes k open the header on device, given a passphrase that
// opens it. It converges from any crash:
//
//  1. a systemd-tpm2 token of k's PCRs that this TPM unseals and whose
//     passphrase opens a keyslot the token names: done;
//  2. such a token whose passphrase opens another keyslot or none (a
//     crash after the token import or after the luksAddKey): add the
//     keyslot if missing and bind the token to it;
//  3. none: seal a new secret, import its token bound to no keyslot yet,
//     add the keyslot, bind the token to it.
//
// The token goes in before its keyslot, so no crash leaves a keyslot
// whose secret is lost.
func (c *Client) enrolTPM2(ctx context.Context, device string, k TPM2Key, opener secret.Value) error {
	if err := tpm2.CheckPCRs(k.PCRs); err != nil {
		return err
	}
	in, err := InspectDevice(device)
	if err != nil {
		return err
	}
	h, ok := in.Best()
	if !ok {
		return fmt.Errorf("no whole LUKS2 header: %w", ErrNoHeader)
	}
	tpm, err := k.open(ctx)
	if err != nil {
		return err
	}
	defer tpm.Close()
	pcrs := slices.Sorted(slices.Values(k.PCRs))
	for _, t := range h.TokenObjects {
		if t.Type != TokenTPM2 {
			continue
		}
		tt, err := ParseTPM2Token(t.JSON)
		if err != nil || !slices.Equal(tt.Sealed.PCRs, pcrs) {
			continue
		}
		s, err := tpm.Unseal(tt.Sealed)
		if err != nil {
			continue
		}
		return c.bindToken(ctx, device, t.ID, tt.Sealed, opener, secret.FromBytes(tpm2Passphrase(s)))
	}
	sealed, pass, err := seal(tpm, k)
	if err != nil {
		return err
	}
	id := 0
	for slices.ContainsFunc(h.TokenObjects, func(t Token) bool { return t.ID == id }) {
		id++
	}
	if err := c.importToken(ctx, device, id, TPM2Token{Sealed: sealed}, false); err != nil {
		return err
	}
	return c.bindToken(ctx, device, id, sealed, opener, pass)
}

// bindToken adds a keyslot for pass unless one opens already, and binds
// token id to it.
func (c *Client) bindToken(ctx context.Context, device string, id int, sealed tpm2.Sealed, opener, pass secret.Value) error {
	slot, ok, err := c.slotOf(ctx, device, pass)
	if err != nil {
		return err
	}
	if !ok {
		args := append([]string{"luksAddKey", "--batch-mode"}, tpm2PBKDF.args()...)
		args = append(args, "--key-file=/proc/self/fd/3", "--new-keyfile=/proc/self/fd/4", "--", device)
		if _, err := c.run(ctx, args, opener, pass); err != nil {
			return err
		}
		if slot, ok, err = c.slotOf(ctx, device, pass); err != nil || !ok {
			return fmt.Errorf("the keyslot just added does not open: %v", err)
		}
	}
	in, err := InspectDevice(device)
	if err != nil {
		return err
	}
	if h, ok := in.Best(); ok {
		for _, t := range h.TokenObjects {
			if t.ID == id && slices.Equal(t.Keyslots, []int{slot}) {
				return nil
			}
		}
	}
	return c.importToken(ctx, device, id, TPM2Token{Keyslots: []int{slot}, Sealed: sealed}, true)
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
// one there when replace is set).
func (c *Client) importToken(ctx context.Context, device string, id int, t TPM2Token, replace bool) error {
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

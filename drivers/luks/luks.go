// Package luks encrypts a block device at rest with LUKS2 and opens it as
// a dm-crypt mapping, through cryptsetup. Keys reach cryptsetup only
// through pipes (stdin, or /proc/self/fd/N of a pipe it inherits), never
// through argv or the environment, and never reach an error or a log.
//
// The caller (the agent's encrypt, open and close operations) owns the
// decisions: Format only formats a device that is blank or holds the
// half-written header of the caller's own interrupted format; Open adopts
// a mapping that is already ours and otherwise tries each key in order;
// neither ever changes a header it cannot open.
package luks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/internal/secret"
)

// Errors a caller tells apart; each returned error wraps one of them.
var (
	// ErrNotBlank: Format found a filesystem, partition table or other
	// signature (including a LUKS header that is not our half-written
	// one). The device is untouched.
	ErrNotBlank = errors.New("device is not blank")
	// ErrNoHeader: Open found no LUKS2 header.
	ErrNoHeader = errors.New("no LUKS2 header")
	// ErrWrongUUID: the header is a different volume's.
	ErrWrongUUID = errors.New("LUKS2 header belongs to another volume")
	// ErrLocked: no key opened the header. The device is untouched.
	ErrLocked = errors.New("no key opens the LUKS2 header")
	// ErrMappingTaken: a device-mapper device of the name is not ours.
	ErrMappingTaken = errors.New("device-mapper name is taken")
)

// cryptsetup's exit status for "no key available with this passphrase".
const exitNoKey = 2

// Key is one way to open a volume. Kind and Describe go into status and
// errors; Material is the secret itself and goes only into a pipe.
type Key interface {
	Kind() string     // "file", "tpm2"
	Describe() string // e.g. "file /etc/volumed/keys/data"; never the key
	Material(ctx context.Context) (secret.Value, error)
}

// FileKey is a key file: a root-owned file of mode 0600 or stricter whose
// every byte is the key, exactly as `cryptsetup --key-file` reads it.
type FileKey struct{ Path string }

func (k FileKey) Kind() string     { return "file" }
func (k FileKey) Describe() string { return "file " + k.Path }
func (k FileKey) Material(context.Context) (secret.Value, error) {
	return secret.ReadExact(k.Path)
}

// PBKDF tunes the key derivation of the keyslots Format writes. The zero
// value is cryptsetup's default (argon2id, ~2 s of work per unlock
// attempt), right for keys a person chose. Random keys of 32 bytes or
// more gain nothing from a slow KDF; systemd-cryptenroll uses pbkdf2 with
// 1000 iterations for them, and so may the caller.
type PBKDF struct {
	Type       string // "argon2id", "argon2i", "pbkdf2"; "" for the default
	Hash       string // the pbkdf2 hash, e.g. "sha512"; "" for the default (sha256)
	Iterations int    // forced iterations (pbkdf2) or time cost (argon2)
	MemoryKiB  int    // argon2 memory cost
}

func (p PBKDF) args() []string {
	var a []string
	if p.Type != "" {
		a = append(a, "--pbkdf", p.Type)
	}
	if p.Hash != "" {
		a = append(a, "--hash", p.Hash)
	}
	if p.Iterations > 0 {
		a = append(a, fmt.Sprintf("--pbkdf-force-iterations=%d", p.Iterations))
	}
	if p.MemoryKiB > 0 {
		a = append(a, fmt.Sprintf("--pbkdf-memory=%d", p.MemoryKiB))
	}
	return a
}

// FormatOptions is what an encrypt operation's intent records before it
// starts: with UUID fixed up front, a restart can tell its own
// half-written header from anyone else's.
type FormatOptions struct {
	Device     string
	UUID       string // the LUKS2 UUID to write, chosen before the first attempt
	Cipher     string // "" for cryptsetup's default (aes-xts-plain64)
	SectorSize int    // 0 for cryptsetup's choice (4096 where the device allows)
	Keys       []Key  // every one is enrolled, in its own keyslot, in this order
	PBKDF      PBKDF
}

// Client runs cryptsetup and reads device-mapper state from sysfs.
type Client struct {
	Cryptsetup string // path or name of cryptsetup; "" for "cryptsetup"
	SysRoot    string // "" for "/sys"; a tree of the same shape in tests
	// observe, when set, sees each cryptsetup command just after it
	// starts (tests look at its /proc entries).
	observe func(*exec.Cmd)
}

func (c *Client) bin() string {
	if c.Cryptsetup != "" {
		return c.Cryptsetup
	}
	return "cryptsetup"
}

// Format writes a LUKS2 header with every key enrolled. The device must
// be blank by the same probe a filesystem format uses, or hold exactly
// the half-written header of this intent (o.UUID); anything else is
// ErrNotBlank and the device is not written. All keys are read before
// the device is touched, so an unreadable key file fails cleanly.
//
// Format is idempotent for one intent: run again after a crash, it
// redoes a torn luksFormat of o.UUID, and on a whole header of o.UUID
// only enrols the keys that do not open it yet.
func (c *Client) Format(ctx context.Context, o FormatOptions) error {
	if len(o.Keys) == 0 {
		return fmt.Errorf("luks format %s: no keys", o.Device)
	}
	if o.UUID == "" {
		return fmt.Errorf("luks format %s: no UUID chosen", o.Device)
	}
	in, err := InspectDevice(o.Device)
	if err != nil {
		return fmt.Errorf("luks format %s: %w", o.Device, err)
	}
	best, whole := in.Best()
	torn := whole && sealedTorn(best, o)
	if whole && best.UUID == o.UUID && best.Keyslots > 0 && !torn {
		// This intent's luksFormat finished; a crash may have come
		// before every key was enrolled.
		return c.enrolMissing(ctx, o, best)
	}
	if in.Found() {
		if !in.HalfWrittenBy(o.UUID) && !torn {
			return fmt.Errorf("luks format %s: a LUKS header (UUID %q) is there already: %w", o.Device, in.UUID(), ErrNotBlank)
		}
	} else {
		v, err := blockfs.IsBlank(ctx, o.Device, blockfs.ExamineOptions{})
		if err != nil {
			return fmt.Errorf("luks format %s: %w", o.Device, err)
		}
		if !v.Blank {
			return fmt.Errorf("luks format %s: %s (%s): %w", o.Device, v.Message, v.Reason, ErrNotBlank)
		}
	}
	// Key files are read before the device is touched; TPM2 and Tang
	// keys are sealed as they are enrolled. The header's first keyslot
	// is the first key that is not sealed, so that a crash during a
	// sealed key's enrolment leaves a header that key opens.
	keys := make([]secret.Value, len(o.Keys))
	first := -1
	for i, k := range o.Keys {
		if sk, ok := k.(sealedKey); ok {
			if err := sk.usable(ctx); err != nil {
				return fmt.Errorf("luks format %s: key %d (%s): %w", o.Device, i, k.Describe(), err)
			}
			continue
		}
		if keys[i], err = k.Material(ctx); err != nil {
			return fmt.Errorf("luks format %s: key %d (%s): %w", o.Device, i, k.Describe(), err)
		}
		if first < 0 {
			first = i
		}
	}
	args := []string{"luksFormat", "--batch-mode", "--type", "luks2", "--uuid", o.UUID}
	if o.Cipher != "" {
		args = append(args, "--cipher", o.Cipher)
	}
	if o.SectorSize > 0 {
		args = append(args, fmt.Sprintf("--sector-size=%d", o.SectorSize))
	}
	var opener secret.Value
	if first >= 0 {
		args = append(args, o.PBKDF.args()...)
		args = append(args, "--key-file=/proc/self/fd/3", "--", o.Device)
		if _, err := c.run(ctx, args, keys[first]); err != nil {
			return fmt.Errorf("luks format %s: %w", o.Device, err)
		}
		opener = keys[first]
	} else {
		first = 0
		if opener, err = c.formatSealedFirst(ctx, o, o.Keys[0].(sealedKey), args); err != nil {
			return err
		}
	}
	for i, k := range o.Keys {
		if i == first {
			continue
		}
		if err := c.enrol(ctx, o, opener, i, k, keys[i]); err != nil {
			return err
		}
	}
	return nil
}

// enrol adds key i with a passphrase that opens the header: a file key's
// content v in a keyslot of its own, a TPM2 key as a sealed secret with
// its token, a Tang key as a secret bound to its server with its token.
func (c *Client) enrol(ctx context.Context, o FormatOptions, opener secret.Value, i int, k Key, v secret.Value) error {
	if sk, ok := k.(sealedKey); ok {
		if err := c.enrolSealed(ctx, o.Device, sk, opener); err != nil {
			return fmt.Errorf("luks format %s: enrol key %d (%s): %w", o.Device, i, k.Describe(), err)
		}
		return nil
	}
	return c.addKey(ctx, o, opener, i, v)
}

func (c *Client) addKey(ctx context.Context, o FormatOptions, opener secret.Value, i int, key secret.Value) error {
	args := append([]string{"luksAddKey", "--batch-mode"}, o.PBKDF.args()...)
	args = append(args, "--key-file=/proc/self/fd/3", "--new-keyfile=/proc/self/fd/4", "--", o.Device)
	if _, err := c.run(ctx, args, opener, key); err != nil {
		return fmt.Errorf("luks format %s: enrol key %d (%s): %w", o.Device, i, o.Keys[i].Describe(), err)
	}
	return nil
}

// enrolMissing finishes an interrupted Format whose header is written:
// the keys that do not open it yet are added with one that does. Data is
// never at risk: the header is not rewritten.
//
// A sealed key is always passed to enrolSealed, which does nothing when
// its token and keyslot are whole and finishes them otherwise.
func (c *Client) enrolMissing(ctx context.Context, o FormatOptions, h Header) error {
	var opener secret.Value
	var missing []int
	vals := make([]secret.Value, len(o.Keys))
	for i, k := range o.Keys {
		_, isSealed := k.(sealedKey)
		offs, err := offers(ctx, k, h)
		if err != nil && !isSealed {
			return fmt.Errorf("luks format %s: key %d (%s): %w", o.Device, i, k.Describe(), err)
		}
		opens := false
		for _, v := range offs {
			ok, err := c.checkKey(ctx, o.Device, v)
			if err != nil {
				return fmt.Errorf("luks format %s: key %d (%s): %w", o.Device, i, k.Describe(), err)
			}
			if ok {
				opens = true
				if opener.Empty() {
					opener = v
				}
				break
			}
		}
		if !isSealed {
			vals[i] = offs[0]
		}
		if !opens || isSealed {
			missing = append(missing, i)
		}
	}
	if opener.Empty() {
		return fmt.Errorf("luks format %s: header %s is this volume's, but none of its keys opens it: %w", o.Device, o.UUID, ErrLocked)
	}
	for _, i := range missing {
		if err := c.enrol(ctx, o, opener, i, o.Keys[i], vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// CheckKey reports whether key opens the header on device, without
// mapping anything (cryptsetup open --test-passphrase): a restart
// checks that a half-enrolled key list still opens, and tests use it
// where the kernel has no dm-crypt.
//
// A sealed key whose tokens cannot be unsealed (another TPM, changed
// PCRs, a Tang server that is down or changed) is an error that says why.
func (c *Client) CheckKey(ctx context.Context, device string, key Key) (bool, error) {
	var h Header
	if _, ok := key.(sealedKey); ok {
		in, err := InspectDevice(device)
		if err != nil {
			return false, fmt.Errorf("luks check %s: %w", device, err)
		}
		if h, ok = in.Best(); !ok {
			return false, fmt.Errorf("luks check %s: %w", device, ErrNoHeader)
		}
	}
	offs, err := offers(ctx, key, h)
	if err != nil {
		return false, fmt.Errorf("luks check %s: %s: %w", device, key.Describe(), err)
	}
	for _, v := range offs {
		ok, err := c.checkKey(ctx, device, v)
		if err != nil || ok {
			if err != nil {
				err = fmt.Errorf("luks check %s: %w", device, err)
			}
			return ok, err
		}
	}
	return false, nil
}

func (c *Client) checkKey(ctx context.Context, device string, v secret.Value) (bool, error) {
	code, err := c.run(ctx, []string{"open", "--test-passphrase", "--type", "luks2", "--key-file=/proc/self/fd/3", "--", device}, v)
	if code == exitNoKey {
		return false, nil
	}
	return err == nil, err
}

// run runs cryptsetup with each key on a pipe at fd 3, 4, ...: the keys
// are written and the write ends closed before the start (a key is far
// smaller than a pipe's buffer), so no goroutine outlives the call. It
// returns cryptsetup's exit status.
func (c *Client) run(ctx context.Context, args []string, keys ...secret.Value) (int, error) {
	_, code, err := c.runOut(ctx, args, nil, keys...)
	return code, err
}

// runOut is run with stdin (not a secret: a token's JSON) and returning
// what cryptsetup printed.
func (c *Client) runOut(ctx context.Context, args []string, stdin []byte, keys ...secret.Value) (string, int, error) {
	cmd := exec.CommandContext(ctx, c.bin(), args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	for _, k := range keys {
		r, err := pipeWith(k.RevealBytes())
		if err != nil {
			return "", -1, err
		}
		defer r.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	}
	if err := cmd.Start(); err != nil {
		return "", -1, err
	}
	if c.observe != nil {
		c.observe(cmd)
	}
	err := cmd.Wait()
	out := stderr.String()
	if err == nil {
		return out, 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, ee.ExitCode(), fmt.Errorf("cryptsetup %s: %w: %s", args[0], err, strings.TrimSpace(out))
	}
	return out, -1, fmt.Errorf("cryptsetup %s: %w", args[0], err)
}

// pipeWith returns the read end of a pipe that holds b and then EOF.
func pipeWith(b []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	if len(b) > secret.MaxSize {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("key of %d bytes is larger than %d", len(b), secret.MaxSize)
	}
	_, err = w.Write(b)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("write key to pipe: %w", err)
	}
	return r, nil
}

// InspectDevice reads the LUKS headers of a block device or image file.
func InspectDevice(path string) (Inspection, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Inspection{}, err
	}
	defer f.Close()
	// Seeking to the end sizes a block device and an image file alike.
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return Inspection{}, err
	}
	return Inspect(f, size)
}

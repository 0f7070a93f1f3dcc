package luks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// OpenOptions name what to open and as what.
type OpenOptions struct {
	Device string // the attached block device
	Name   string // the mapping's name, e.g. "volumed-data"
	UUID   string // the LUKS2 UUID the volume's state recorded; "" to accept any
	Keys   []Key  // tried in order, those that need the network last; the first that opens wins
}

// Opened says how a volume was opened. Key is -1 when an existing
// mapping was adopted (which key opened it then is the caller's record).
type Opened struct {
	Path    string // /dev/mapper/<name>
	Mapping Mapping
	Adopted bool
	Key     int    // index into OpenOptions.Keys
	KeyKind string // Keys[Key].Kind(), for status
	// KeyTime is how long the opening key took to get: reading a key
	// file, or unsealing a TPM2 key's tokens.
	KeyTime time.Duration
}

// KeyFailure is why one key did not open a volume, without the key.
type KeyFailure struct {
	Key     int
	Desc    string
	Reason  string
	Waiting bool // the key's server did not answer: retrying may open it
	// WaitFor is, when Waiting, each server that did not answer and its
	// error ("waiting for tang server URL: ..."): a threshold's Reason
	// starts with its shares' count.
	WaitFor string
}

// keyFailure is why key i failed to give a passphrase.
func keyFailure(i int, k Key, err error) KeyFailure {
	w := waitsIn(err)
	return KeyFailure{Key: i, Desc: k.Describe(), Reason: err.Error(), Waiting: len(w) > 0, WaitFor: strings.Join(w, "; ")}
}

// waitsIn are the WaitingErrors in err's tree, in order.
func waitsIn(err error) []string {
	if we, ok := err.(*WaitingError); ok {
		return []string{we.Error()}
	}
	var out []string
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, waitsIn(e)...)
		}
	case interface{ Unwrap() error }:
		out = waitsIn(u.Unwrap())
	}
	return out
}

// LockedError is ErrLocked with each key's reason, and the token types
// the header carries (a systemd-tpm2 token says the TPM could open it).
type LockedError struct {
	Device   string
	Failures []KeyFailure
	Tokens   []string
}

func (e *LockedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: no key opens its LUKS2 header", e.Device)
	for _, f := range e.Failures {
		fmt.Fprintf(&b, "; key %d (%s): %s", f.Key, f.Desc, f.Reason)
	}
	if len(e.Failures) == 0 {
		b.WriteString("; no keys given")
	}
	if len(e.Tokens) > 0 {
		fmt.Fprintf(&b, "; the header carries tokens %s", strings.Join(e.Tokens, ", "))
	}
	return b.String()
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// Waiting is what the volume waits for: each key server that did not
// answer ("waiting for tang server URL: <its error>"), or "".
func (e *LockedError) Waiting() string {
	var w []string
	for _, f := range e.Failures {
		switch {
		case f.WaitFor != "":
			w = append(w, f.WaitFor)
		case f.Waiting:
			w = append(w, f.Reason)
		}
	}
	return strings.Join(w, "; ")
}

// networkKey is a key that needs a server on the network.
type networkKey interface{ needsNetwork() bool }

// tryOrder is the order Open tries keys in: as given, except that keys
// needing the network come after all others, so that a server that does
// not answer holds nothing up when another key opens the volume.
func tryOrder(keys []Key) []int {
	var local, remote []int
	for i, k := range keys {
		if nk, ok := k.(networkKey); ok && nk.needsNetwork() {
			remote = append(remote, i)
			continue
		}
		local = append(local, i)
	}
	return append(local, remote...)
}

// Open maps the LUKS2 volume on o.Device as /dev/mapper/<o.Name>. A
// mapping of that name that is ours (crypt, this header's UUID, on this
// device) is adopted as it is. A header that is absent, another volume's,
// or opened by none of the keys is an error and stays as it was.
func (c *Client) Open(ctx context.Context, o OpenOptions) (Opened, error) {
	in, err := InspectDevice(o.Device)
	if err != nil {
		return Opened{}, fmt.Errorf("luks open %s: %w", o.Device, err)
	}
	best, ok := in.Best()
	if !ok {
		if in.Found() {
			return Opened{}, fmt.Errorf("luks open %s: %w: %s", o.Device, ErrNoHeader, in.Copies[0].Problem)
		}
		return Opened{}, fmt.Errorf("luks open %s: %w", o.Device, ErrNoHeader)
	}
	if o.UUID != "" && best.UUID != o.UUID {
		return Opened{}, fmt.Errorf("luks open %s: header UUID %s, want %s: %w", o.Device, best.UUID, o.UUID, ErrWrongUUID)
	}
	m, found, err := c.Mapping(o.Name)
	if err != nil {
		return Opened{}, fmt.Errorf("luks open %s: %w", o.Device, err)
	}
	if found {
		if err := c.ours(m, o.Device, best.UUID); err != nil {
			return Opened{}, fmt.Errorf("luks open %s as %s: %w", o.Device, o.Name, err)
		}
		return Opened{Path: "/dev/mapper/" + o.Name, Mapping: m, Adopted: true, Key: -1}, nil
	}
	locked := &LockedError{Device: o.Device, Tokens: best.Tokens}
	for _, i := range tryOrder(o.Keys) {
		k := o.Keys[i]
		start := time.Now()
		offs, err := offers(ctx, k, best)
		took := time.Since(start)
		if err != nil {
			locked.Failures = append(locked.Failures, keyFailure(i, k, err))
			continue
		}
		for _, v := range offs {
			args := []string{"open", "--type", "luks2", "--key-file=/proc/self/fd/3", "--", o.Device, o.Name}
			code, err := c.run(ctx, args, v)
			if code == exitNoKey {
				continue
			}
			if err != nil {
				return Opened{}, fmt.Errorf("luks open %s as %s with key %d (%s): %w", o.Device, o.Name, i, k.Describe(), err)
			}
			m, found, err := c.Mapping(o.Name)
			if err != nil || !found {
				return Opened{}, fmt.Errorf("luks open %s as %s: cryptsetup succeeded but the mapping is not in sysfs: %v", o.Device, o.Name, err)
			}
			return Opened{Path: "/dev/mapper/" + o.Name, Mapping: m, Key: i, KeyKind: k.Kind(), KeyTime: took}, nil
		}
		locked.Failures = append(locked.Failures, KeyFailure{Key: i, Desc: k.Describe(), Reason: "does not match any keyslot"})
	}
	return Opened{}, locked
}

// ours checks that a mapping is the dm-crypt mapping of the header uuid
// on device.
func (c *Client) ours(m Mapping, device, uuid string) error {
	if !m.Crypt() || m.LUKSUUID() != uuid {
		return fmt.Errorf("%s has DM uuid %q, not LUKS2 volume %s's: %w", m.Name, m.UUID, uuid, ErrMappingTaken)
	}
	var st unix.Stat_t
	if err := unix.Stat(device, &st); err != nil {
		return err
	}
	want := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || len(m.Slaves) != 1 || m.Slaves[0] != want {
		return fmt.Errorf("%s sits on %v, not on %s (%s): %w", m.Name, m.Slaves, device, want, ErrMappingTaken)
	}
	return nil
}

// Close removes the mapping name; a mapping already gone is success. It
// refuses a device-mapper device of that name that is not a crypt
// mapping: closing is only for what Open made.
func (c *Client) Close(ctx context.Context, name string) error {
	m, found, err := c.Mapping(name)
	if err != nil {
		return fmt.Errorf("luks close %s: %w", name, err)
	}
	if !found {
		return nil
	}
	if !m.Crypt() {
		return fmt.Errorf("luks close %s: DM uuid %q: %w", name, m.UUID, ErrMappingTaken)
	}
	if _, err := c.run(ctx, []string{"close", "--", name}); err != nil {
		return fmt.Errorf("luks close %s: %w", name, err)
	}
	return nil
}

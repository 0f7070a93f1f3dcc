// Package secret reads secrets (CHAP passwords, DH-HMAC-CHAP keys) from
// files the way sshd treats its keys: the file must be a regular file
// owned by root that nobody else can read, and the secret never reaches
// a log line, an error or a status field by accident.
package secret

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxSize bounds a secret file: secrets are short, and reading an
// arbitrary file into memory because a manifest named it is not.
const MaxSize = 4096

// Value holds a secret. Its String and GoString never show it, so a
// Value put in a log or an error by mistake stays redacted.
type Value struct{ b []byte }

func (Value) String() string   { return "[redacted]" }
func (Value) GoString() string { return "secret.Value{[redacted]}" }

// MarshalText keeps a Value out of JSON and YAML output too.
func (Value) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// Reveal returns the secret itself, for the one place that hands it to
// the kernel or to iscsiadm.
func (v Value) Reveal() string { return string(v.b) }

// Empty reports whether no secret is held.
func (v Value) Empty() bool { return len(v.b) == 0 }

// ErrInsecure marks a secret file anyone but root could read or change.
var ErrInsecure = errors.New("insecure secret file")

// Check verifies that path is a root-owned regular file of mode 0600 or
// stricter, without reading it.
func Check(path string) error {
	f, err := open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// Read checks the file like Check and returns its content with one
// trailing newline removed (files written by `echo` end in one).
func Read(path string) (Value, error) {
	b, err := readChecked(path)
	if err != nil {
		return Value{}, err
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return Value{}, fmt.Errorf("secret file %s: empty", path)
	}
	return Value{b: b}, nil
}

// ReadExact is Read without the newline trimming: a LUKS key file's every
// byte is the key, as `cryptsetup --key-file` reads it, so an operator can
// still open the volume by hand with the same file.
func ReadExact(path string) (Value, error) {
	b, err := readChecked(path)
	if err != nil {
		return Value{}, err
	}
	if len(b) == 0 {
		return Value{}, fmt.Errorf("secret file %s: empty", path)
	}
	return Value{b: b}, nil
}

// RevealBytes is Reveal for consumers that write the secret to a pipe.
func (v Value) RevealBytes() []byte { return v.b }

func readChecked(path string) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("secret file %s: %w", path, err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("secret file %s: larger than %d bytes", path, MaxSize)
	}
	return b, nil
}

// open opens without following a final symlink (a symlink could point a
// check at one file and the read at another) and checks the opened file.
func open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("secret file %s: is a symlink: %w", path, ErrInsecure)
		}
		return nil, fmt.Errorf("secret file: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("secret file %s: %w", path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("secret file %s: not a regular file: %w", path, ErrInsecure)
	case !ok || st.Uid != 0:
		err = fmt.Errorf("secret file %s: owned by uid %d, must be owned by root: %w", path, st.Uid, ErrInsecure)
	case fi.Mode().Perm()&0o077 != 0:
		err = fmt.Errorf("secret file %s: mode %04o lets group or others read it, must be 0600 or stricter: %w", path, fi.Mode().Perm(), ErrInsecure)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/luks"
	"github.com/volumed/volumed/internal/secret"
)

// luksPBKDF is the key derivation of the keyslots volumed writes. The
// default, argon2id, has its time cost benchmarked by cryptsetup (about
// 2 s per unlock attempt, a brute force's cost too, since a key file may
// hold a passphrase a person chose) and its memory capped at 64 MiB, so
// that an edge box with little RAM opens what another host formatted.
// pbkdf2 at 1000 iterations is for keys of full entropy (random key
// files, TPM2-sealed keys), as systemd-cryptenroll does for its own.
func luksPBKDF(name string) luks.PBKDF {
	if name == manifest.PBKDFPBKDF2 {
		return luks.PBKDF{Type: "pbkdf2", Iterations: 1000}
	}
	return luks.PBKDF{Type: "argon2id", MemoryKiB: 64 << 10}
}

// crypt adapts drivers/luks to the core's Crypt port. answers is what
// the Tang servers of every volume's keys did at their last request.
type crypt struct {
	c       *luks.Client
	answers *luks.Answers
}

func tangKey(k *manifest.TangKey, answers *luks.Answers) luks.TangKey {
	return luks.TangKey{URL: k.URL, Thumbprint: k.Thumbprint, Answers: answers}
}

// thresholdKey is a threshold and its shares, nested thresholds too
// (validation lets only tang, tpm2 and threshold keys in).
func thresholdKey(k *manifest.ThresholdKey, answers *luks.Answers) luks.ThresholdKey {
	t := luks.ThresholdKey{N: k.N}
	for _, s := range k.Keys {
		switch {
		case s.TPM2 != nil:
			t.Keys = append(t.Keys, luks.TPM2Key{PCRs: s.TPM2.PCRs})
		case s.Tang != nil:
			t.Keys = append(t.Keys, tangKey(s.Tang, answers))
		case s.Threshold != nil:
			t.Keys = append(t.Keys, thresholdKey(s.Threshold, answers))
		}
	}
	return t
}

func luksKeys(keys []manifest.LUKS2Key, answers *luks.Answers) []luks.Key {
	out := make([]luks.Key, 0, len(keys))
	for _, k := range keys {
		switch {
		case k.TPM2 != nil:
			out = append(out, luks.TPM2Key{PCRs: k.TPM2.PCRs})
		case k.Tang != nil:
			out = append(out, tangKey(k.Tang, answers))
		case k.Threshold != nil:
			out = append(out, thresholdKey(k.Threshold, answers))
		default:
			out = append(out, luks.FileKey{Path: k.File})
		}
	}
	return out
}

func (c crypt) Inspect(dev, intentUUID string) (agent.LUKSHeader, error) {
	in, err := luks.InspectDevice(dev)
	if err != nil {
		return agent.LUKSHeader{}, err
	}
	best, whole := in.Best()
	return agent.LUKSHeader{
		Found:       in.Found(),
		Whole:       whole && best.Keyslots > 0,
		UUID:        in.UUID(),
		HalfWritten: in.HalfWrittenBy(intentUUID),
	}, nil
}

func (c crypt) Format(ctx context.Context, o agent.CryptFormat) error {
	return markLocked(c.c.Format(ctx, luks.FormatOptions{
		Device: o.Device, UUID: o.UUID, Cipher: o.Cipher, SectorSize: o.SectorSize,
		Keys: luksKeys(o.Keys, c.answers), PBKDF: luksPBKDF(o.PBKDF),
	}))
}

func opened(o luks.Opened) agent.CryptOpened {
	return agent.CryptOpened{Device: o.Path, UUID: o.Mapping.LUKSUUID(), Adopted: o.Adopted, KeyKind: o.KeyKind}
}

func (c crypt) Open(ctx context.Context, o agent.CryptOpen) (agent.CryptOpened, error) {
	op, err := c.c.Open(ctx, luks.OpenOptions{Device: o.Device, Name: o.Name, UUID: o.UUID, Keys: luksKeys(o.Keys, c.answers)})
	if err != nil {
		return agent.CryptOpened{}, markLocked(err)
	}
	return opened(op), nil
}

// Adopt looks the name up in sysfs first: a volume whose mapping is not
// open costs no header read and runs no cryptsetup. Open with no keys
// only ever adopts.
func (c crypt) Adopt(ctx context.Context, dev, name, uuid string) (agent.CryptOpened, bool, error) {
	if _, found, err := c.c.Mapping(name); err != nil || !found {
		return agent.CryptOpened{}, false, err
	}
	op, err := c.c.Open(ctx, luks.OpenOptions{Device: dev, Name: name, UUID: uuid})
	if err != nil {
		return agent.CryptOpened{}, false, err
	}
	return opened(op), true, nil
}

func (c crypt) Close(ctx context.Context, name string) error { return c.c.Close(ctx, name) }

func (c crypt) Resize(ctx context.Context, o agent.CryptOpen) error {
	return markLocked(c.c.Resize(ctx, o.Device, o.Name, luksKeys(o.Keys, c.answers)))
}

// AddRecoveryKey enrols a recovery key in the header on o.Device, which
// must be o.UUID's when that is set.
func (c crypt) AddRecoveryKey(ctx context.Context, o agent.CryptOpen) (secret.Value, error) {
	if o.UUID != "" {
		in, err := luks.InspectDevice(o.Device)
		if err != nil {
			return secret.Value{}, err
		}
		if in.UUID() != o.UUID {
			return secret.Value{}, fmt.Errorf("recovery key for %s: header UUID %s, want %s: %w", o.Device, in.UUID(), o.UUID, luks.ErrWrongUUID)
		}
	}
	k, err := c.c.AddRecoveryKey(ctx, o.Device, luksKeys(o.Keys, c.answers))
	return k, markLocked(err)
}

// lockedError lets the core see the driver's locked error as
// agent.ErrLocked while keeping its words (each key and why it failed).
type lockedError struct{ error }

func (lockedError) Is(target error) bool { return target == agent.ErrLocked }
func (e lockedError) Unwrap() error      { return e.error }

func markLocked(err error) error {
	if err != nil && errors.Is(err, luks.ErrLocked) {
		return lockedError{err}
	}
	return err
}

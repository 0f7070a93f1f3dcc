// Encryption at rest: the open and close operations of a LUKS2 volume,
// and the decision whether its device may get a header.

package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// ErrLocked marks an open that no key could do: the header is there and
// untouched, and the volume waits for a key that works.
var ErrLocked = errors.New("no key opens the LUKS2 header")

// MappingName is the dm-crypt mapping of a volume: volume names are at
// most 63 characters, well inside device-mapper's 127.
func MappingName(volume string) string { return "volumed-" + volume }

// blockDevice is the device a volume's filesystem is on: its dm-crypt
// mapping when it is encrypted and open, else its attachment.
func blockDevice(rec *store.Volume) string {
	if rec.Mapping != nil {
		return rec.Mapping.Device
	}
	return rec.Attachment.Device
}

func (a *Agent) crypt() (Crypt, error) {
	if a.cfg.Crypt == nil {
		return nil, errors.New("encryption is not available in this build")
	}
	return a.cfg.Crypt, nil
}

// opOpen opens the volume's dm-crypt mapping, writing the LUKS2 header
// first when the device is blank (the encrypt operation, under its own
// intent, with the UUID chosen before it starts).
func (a *Agent) opOpen(ctx context.Context, d *Desired) error {
	err := a.open(ctx, d)
	a.noteLocked(d.Name, err)
	return err
}

func (a *Agent) open(ctx context.Context, d *Desired) error {
	rec := a.state.Get(d.Name)
	if rec == nil || rec.Attachment == nil {
		return errRetryNow
	}
	c, err := a.crypt()
	if err != nil {
		return err
	}
	dev := rec.Attachment.Device
	luks := d.Spec.Encryption.LUKS2
	interrupted, _ := a.formats.encrypting.of(d.Name)
	hdr, err := c.Inspect(dev, interrupted)
	if err != nil {
		return fmt.Errorf("read the LUKS2 header of %s: %w", dev, err)
	}
	var sigs []Signature
	if !hdr.Found {
		if sigs, err = a.cfg.FS.Probe(ctx, dev); err != nil {
			return fmt.Errorf("probe %s: %w", dev, err)
		}
	}
	verdict, err := decide.Encrypt(interrupted, hdr, sigs, d.Spec.Filesystem)
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	if err := a.checkIdentity(d, dev, decide.PartLUKS, hdr.UUID, verdict == decide.EncryptFormat && interrupted == ""); err != nil {
		return err
	}
	header := hdr.UUID
	if verdict == decide.EncryptFormat {
		header = interrupted
		if header == "" {
			if err := a.checkBlank(ctx, d.Name, dev, a.createdSource(d)); err != nil {
				return fmt.Errorf("%s: %w", dev, err)
			}
			header = uuid.NewString()
		}
		err := a.run(ctx, d.Name, d.Kind, OpEncrypt, func(ctx context.Context) error {
			inputs := map[string]string{"device": dev, "uuid": header, "cipher": luks.Cipher, "sectorSize": strconv.Itoa(luks.SectorSize), "pbkdf": luks.PBKDF}
			return a.state.Do(d.Name, d.Kind, OpEncrypt, inputs, func(*store.Volume) error {
				// The header's UUID is the volume's, as volumed's own
				// format, before the header is written: the mapping it
				// opens decrypts the zeros the blank rule passed into
				// noise, blank only by this record (decide.BlankByRecord), and
				// a power cut between the header and a later record
				// left the volume NotBlank on its own new mapping.
				// After the intent: a cut before it leaves no header and
				// no identity, where a recorded one would say the blank
				// device had lost it.
				if err := a.idents.learn(d.Name, d.Caps.Key, decide.PartLUKS, header, decide.HowFormatted); err != nil {
					return fmt.Errorf("record the LUKS2 header UUID of %s: %w", d.Name, err)
				}
				return c.Format(ctx, CryptFormat{Device: dev, UUID: header, Cipher: luks.Cipher, SectorSize: luks.SectorSize, PBKDF: luks.PBKDF, Keys: luks.Keys})
			})
		})
		if err != nil {
			// The identity holds this UUID now: the next attempt
			// finishes this format, as after a crash (a key server
			// that did not answer stops it before luksFormat; the
			// blank device is not another volume's).
			a.formats.encrypting.set(d.Name, header)
			return err
		}
	}
	a.formats.encrypting.clear(d.Name)
	name := MappingName(d.Name)
	inputs := map[string]string{"device": dev, "mapping": name, "uuid": header}
	return a.state.Do(d.Name, d.Kind, OpOpen, inputs, func(rec *store.Volume) error {
		o, err := c.Open(ctx, CryptOpen{Device: dev, Name: name, UUID: header, Keys: luks.Keys})
		if err != nil {
			return err
		}
		rec.Mapping = &store.Mapping{Name: name, UUID: o.UUID, Device: o.Device, KeyKind: o.KeyKind, HeaderBytes: a.headerBytes(dev, o.Device)}
		if o.Adopted {
			a.cfg.Log.Info("adopted the open mapping", "volume", d.Name, "mapping", name)
		} else {
			a.cfg.Log.Info("opened", "volume", d.Name, "mapping", name, "key", o.KeyKind)
		}
		return nil
	})
}

// noteLocked keeps the Locked condition of a volume: raised when no key
// opens it (the message names each key and why it failed, never a key),
// cleared by any open or close that gets through. A volume whose key
// server did not answer says first that it waits for it: the open is
// retried with the executor's backoff and succeeds once it answers
// (at format too: no header is written before every server answers).
// A person with a recovery key opens the volume's mapping by hand, where
// cryptsetup asks for a passphrase; the next open adopts it.
func (a *Agent) noteLocked(name string, err error) {
	if w := keyServerWait(err); w != "" {
		a.apply(name, CondLocked, &Problem{Reason: "WaitingForKeyServer", Message: w +
			" (retried with backoff; the device is left as it is until it answers); " + err.Error()}, nil)
		return
	}
	if errors.Is(err, ErrLocked) {
		dev := "DEVICE"
		if rec := a.state.Get(name); rec != nil && rec.Attachment != nil {
			dev = rec.Attachment.Device
		}
		a.apply(name, CondLocked, &Problem{Reason: "NoKeyOpens", Message: err.Error() +
			"; the header is left as it is: give a key that opens it (the manifest's keys are tried again at each retry)" +
			", or open it with a recovery key as " + MappingName(name) + " (cryptsetup open " + dev + " " + MappingName(name) + "), which volumed adopts"}, nil)
		return
	}
	if err == nil {
		a.apply(name, CondLocked, nil, nil)
	}
}

// opClose closes the volume's mapping, after its filesystem is unmounted
// and before its device is detached.
func (a *Agent) opClose(ctx context.Context, name, kind string) error {
	c, err := a.crypt()
	if err != nil {
		return err
	}
	rec := a.state.Get(name)
	if rec == nil || rec.Mapping == nil {
		return errRetryNow
	}
	inputs := map[string]string{"mapping": rec.Mapping.Name}
	return a.state.Do(name, kind, OpClose, inputs, func(rec *store.Volume) error {
		if rec.Mapping == nil {
			return nil
		}
		m := rec.Mapping
		closeIt := func(ctx context.Context) error { return c.Close(ctx, m.Name) }
		if err := a.teardownStep(ctx, name, "close", m.Device, 0, closeIt); err != nil {
			return err
		}
		rec.Mapping = nil
		a.apply(name, CondLocked, nil, nil)
		return nil
	})
}

// adoptMapping is reconstruction's look at an encrypted volume: its
// mapping, when open and the LUKS2 volume on its attached device, is
// adopted as it is (never reopened); otherwise the volume is closed
// and the next pass opens it with its keys.
// uuid, when set, is the LUKS2 UUID the record or an uncertain open
// names: a mapping of another header is not the volume's.
func (a *Agent) adoptMapping(ctx context.Context, name string, v, rec *store.Volume, uuid string) {
	if v.Attachment == nil || a.cfg.Crypt == nil {
		return
	}
	log := a.cfg.Log.With("volume", name)
	o, ok, err := a.cfg.Crypt.Adopt(ctx, v.Attachment.Device, MappingName(name), uuid)
	switch {
	case err != nil:
		log.Warn("the volume's mapping is not its own; left alone", "mapping", MappingName(name), "error", err)
		return
	case !ok:
		if rec != nil && rec.Mapping != nil {
			log.Info("recorded mapping is gone; it is opened again", "mapping", rec.Mapping.Name)
		}
		return
	}
	m := &store.Mapping{Name: MappingName(name), UUID: o.UUID, Device: o.Device, HeaderBytes: a.headerBytes(v.Attachment.Device, o.Device)}
	if rec != nil && rec.Mapping != nil && rec.Mapping.UUID == o.UUID {
		m.KeyKind = rec.Mapping.KeyKind
	}
	v.Mapping = m
	log.Info("adopting the open mapping", "mapping", m.Name, "uuid", m.UUID)
}

// headerBytes is how much of the device the LUKS2 volume keeps for
// itself (its header, before the data): the mapping is that much smaller
// than the device, which is how a growth check sees that the device grew
// under a mapping. 0 when a size cannot be read: growth is then not
// looked for.
func (a *Agent) headerBytes(dev, mapping string) int64 {
	d, err := a.cfg.FS.DeviceSize(dev)
	if err != nil {
		return 0
	}
	m, err := a.cfg.FS.DeviceSize(mapping)
	if err != nil || m <= 0 || m > d {
		return 0
	}
	return d - m
}

// resizeMapping has an open mapping fill its grown device.
func (a *Agent) resizeMapping(ctx context.Context, d *Desired, rec *store.Volume) error {
	c, err := a.crypt()
	if err != nil {
		return err
	}
	var keys []manifest.LUKS2Key
	if d.Encrypted() {
		keys = d.Spec.Encryption.LUKS2.Keys
	}
	return c.Resize(ctx, CryptOpen{Device: rec.Attachment.Device, Name: rec.Mapping.Name, UUID: rec.Mapping.UUID, Keys: keys})
}

// growableSize is the size a growth check compares with the size the
// filesystem was fitted to: the device's, less the LUKS2 header of an
// encrypted volume (whose mapping is resized by the grow).
func (a *Agent) growableSize(rec *store.Volume) (int64, error) {
	m := rec.Mapping
	if m == nil || m.HeaderBytes <= 0 {
		dev := blockDevice(rec)
		n, err := a.cfg.FS.DeviceSize(dev)
		if err != nil {
			return 0, fmt.Errorf("size of %s: %w", dev, err)
		}
		return n, nil
	}
	n, err := a.cfg.FS.DeviceSize(rec.Attachment.Device)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", rec.Attachment.Device, err)
	}
	return n - m.HeaderBytes, nil
}

// keyServerWait is what an open's error says it waits for ("waiting for
// tang server URL: ..."), or "" when it waits for nothing: the one rule
// for the Locked condition's reason and the volume's phase.
func keyServerWait(err error) string {
	var w KeyServerWait
	if errors.As(err, &w) {
		return w.Waiting()
	}
	return ""
}

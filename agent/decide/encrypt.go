package decide

import (
	"errors"
	"fmt"

	"github.com/volumed/volumed/agent/manifest"
)

// EncryptVerdict is what Encrypt makes of a device.
type EncryptVerdict int

// Encrypt is the encrypt-or-not decision, made in the open
// operation over the probe and header read right before, like
// Mkfs: only a blank device gets a header, by the same probe
// (every signature, every offset) that guards mkfs, and a header that
// is there is opened, never rewritten. interrupted is the UUID of an
// encrypt a crash left uncertain ("" if none): a torn header of exactly
// that UUID is written again, and a whole one has its missing keys
// enrolled (Format does nothing else to it).
func Encrypt(interrupted string, hdr LUKSHeader, sigs []Signature, fs *manifest.Filesystem) (EncryptVerdict, error) {
	switch {
	case hdr.Whole && interrupted != "" && hdr.UUID == interrupted:
		return EncryptFormat, nil
	case hdr.Whole:
		return EncryptOpen, nil
	case hdr.Found && interrupted != "" && hdr.HalfWritten:
		return EncryptFormat, nil
	case hdr.Found:
		return EncryptRefuse, fmt.Errorf("carries a LUKS header (UUID %q) that is damaged or torn and not the one volumed was writing: volumed never rewrites it", hdr.UUID)
	}
	for _, s := range sigs {
		return EncryptRefuse, fmt.Errorf("carries a %s signature (%s, at byte %d): volumed never encrypts over it", s.Type, s.Usage, s.Offset)
	}
	if fs != nil && fs.Format == manifest.FormatNever {
		return EncryptRefuse, errors.New("is blank and filesystem.format is never: no LUKS2 header is written")
	}
	return EncryptFormat, nil
}

const (
	// EncryptOpen: a whole LUKS2 header is there: open it, never rewrite it.
	EncryptOpen EncryptVerdict = iota
	// EncryptFormat: blank (or the torn header of our own interrupted
	// encrypt): write the header, then open.
	EncryptFormat
	// EncryptRefuse: something else is on the device; nothing is written.
	EncryptRefuse
)

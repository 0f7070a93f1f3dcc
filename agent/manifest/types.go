// Package manifest reads volumed's manifest files (apiVersion volumed/v1)
// from the drop-in directories, decodes them strictly and validates them.
package manifest

import "slices"

// APIVersion is the only apiVersion this build understands.
const APIVersion = "volumed/v1"

// Kinds of objects a manifest document may declare.
const (
	KindVolume = "Volume"
	KindMount  = "Mount"
)

// Object is one decoded YAML document.
type Object struct {
	APIVersion string   `yaml:"apiVersion" json:"apiVersion"`
	Kind       string   `yaml:"kind" json:"kind"`
	Metadata   Metadata `yaml:"metadata" json:"metadata"`
	// Exactly one of Volume or Mount is set, per Kind.
	Volume *VolumeSpec `yaml:"-" json:"-"`
	Mount  *MountSpec  `yaml:"-" json:"-"`

	// Where the object came from, for messages and `status`.
	File string `yaml:"-" json:"-"`
	Line int    `yaml:"-" json:"-"`

	// pos maps field paths written in the file to their positions, so
	// problems found after decoding (conflicts) can still point at them.
	pos map[string]position
}

// ProblemAt is a Problem at field of o (a dotted path,
// "spec.filesystem.type"), placed where the file wrote it, or at its
// nearest written ancestor.
func (o *Object) ProblemAt(field, reason string) Problem { return o.problem(field, reason) }

type Metadata struct {
	Name string `yaml:"name" json:"name"`
}

type VolumeSpec struct {
	// State is "present" (default) or "absent" (tear down, keep the manifest).
	State      string      `yaml:"state,omitempty" json:"state,omitempty"`
	Source     Source      `yaml:"source" json:"source"`
	Filesystem *Filesystem `yaml:"filesystem,omitempty" json:"filesystem,omitempty"`
	// Encryption puts the filesystem inside a LUKS2 volume on the block
	// device, opened as a dm-crypt mapping between attach and mount.
	Encryption *Encryption `yaml:"encryption,omitempty" json:"encryption,omitempty"`
	Mounts     []Target    `yaml:"mounts,omitempty" json:"mounts,omitempty"`
}

// Format policies.
const (
	FormatIfBlank = "ifBlank"
	FormatNever   = "never"
)

type Filesystem struct {
	Type         string   `yaml:"type" json:"type"`                         // ext4 | xfs | btrfs
	Format       string   `yaml:"format,omitempty" json:"format,omitempty"` // ifBlank (default) | never
	MkfsOptions  []string `yaml:"mkfsOptions,omitempty" json:"mkfsOptions,omitempty"`
	MountOptions []string `yaml:"mountOptions,omitempty" json:"mountOptions,omitempty"`
	AllowSuid    bool     `yaml:"allowSuid,omitempty" json:"allowSuid,omitempty"`
	AllowDev     bool     `yaml:"allowDev,omitempty" json:"allowDev,omitempty"`
	Grow         bool     `yaml:"grow,omitempty" json:"grow,omitempty"`
}

// Encryption says how a block volume is encrypted at rest.
type Encryption struct {
	LUKS2 *LUKS2 `yaml:"luks2" json:"luks2"`
}

// LUKS2 is a LUKS2 header written only on a blank device (every key
// enrolled), opened by whichever key works first.
type LUKS2 struct {
	// Keys are tried in order; any one opens the volume.
	Keys []LUKS2Key `yaml:"keys" json:"keys"`
	// Cipher for luksFormat (e.g. aes-xts-plain64); cryptsetup's default
	// when empty. Read only when the header is written.
	Cipher string `yaml:"cipher,omitempty" json:"cipher,omitempty"`
	// SectorSize of the encryption (512, 1024, 2048 or 4096); cryptsetup
	// chooses when 0. Read only when the header is written.
	SectorSize int `yaml:"sectorSize,omitempty" json:"sectorSize,omitempty"`
	// PBKDF derives each keyslot's key from its key: argon2id (default:
	// about 2 s and 64 MiB per unlock attempt, for a key file that may
	// hold a passphrase) or pbkdf2 (1000 iterations, instant: only for
	// keys of full entropy, such as random key files, as
	// systemd-cryptenroll does for the keys it makes). Read only when
	// the header is written.
	PBKDF string `yaml:"pbkdf,omitempty" json:"pbkdf,omitempty"`
}

// Key derivations of LUKS2.PBKDF.
const (
	PBKDFArgon2id = "argon2id"
	PBKDFPBKDF2   = "pbkdf2"
)

// LUKS2Key is one key: exactly one of File, TPM2, Tang or Threshold.
type LUKS2Key struct {
	// File is a root-owned 0600 file whose every byte is the key.
	File string `yaml:"file,omitempty" json:"file,omitempty"`
	// TPM2 is a random key sealed by the host's TPM2 to PCR values.
	TPM2 *TPM2Key `yaml:"tpm2,omitempty" json:"tpm2,omitempty"`
	// Tang is a random key bound to a Tang server (Clevis' tang pin):
	// the volume opens only while the server answers.
	Tang *TangKey `yaml:"tang,omitempty" json:"tang,omitempty"`
	// Threshold is a random key that any N of its keys recover (Clevis'
	// sss pin, e.g. 2 of 3 Tang servers, or TPM2 and Tang).
	Threshold *ThresholdKey `yaml:"threshold,omitempty" json:"threshold,omitempty"`
}

// ThresholdKey splits a key so that any N of Keys recover it (Clevis'
// sss pin). Its keys are Tang keys, one TPM2 key (Clevis' tpm2 pin) and,
// one level deep, thresholds.
type ThresholdKey struct {
	N    int        `yaml:"n" json:"n"`
	Keys []LUKS2Key `yaml:"keys" json:"keys"`
}

// TangKey is a Tang server and its signing key's thumbprint, which
// pins it: a server that does not sign with that key is refused.
type TangKey struct {
	// URL is the server's base URL (http or https).
	URL string `yaml:"url" json:"url"`
	// Thumbprint is the signing key's JWK thumbprint, as
	// `tang-show-keys` prints it on the server (SHA-256, base64url).
	Thumbprint string `yaml:"thumbprint" json:"thumbprint"`
}

// TPM2Key seals a key to the values of PCRs (0..23).
type TPM2Key struct {
	PCRs []int `yaml:"pcrs" json:"pcrs"`
}

// UsesTPM2 says whether the key is sealed by the TPM2, itself or as a
// share of a threshold.
func (k LUKS2Key) UsesTPM2() bool {
	return k.TPM2 != nil || (k.Threshold != nil && slices.ContainsFunc(k.Threshold.Keys, LUKS2Key.UsesTPM2))
}

// Kind names the key's kind: "file", "tpm2", "tang" or "threshold".
func (k LUKS2Key) Kind() string {
	switch {
	case k.TPM2 != nil:
		return "tpm2"
	case k.Tang != nil:
		return "tang"
	case k.Threshold != nil:
		return "threshold"
	}
	return "file"
}

// Target is one place a volume is published (a bind mount of its staging mount).
type Target struct {
	Path     string `yaml:"path" json:"path"`
	ReadOnly bool   `yaml:"readOnly,omitempty" json:"readOnly,omitempty"`
	// NestedIn names the volume whose target this path lies inside: a
	// target under another target is refused unless declared so, because
	// it is published only after, and removed before, the one it is in.
	NestedIn string `yaml:"nestedIn,omitempty" json:"nestedIn,omitempty"`
	// AllowNonEmpty allows publishing onto a directory that holds
	// something, which the mount then hides; refused otherwise.
	AllowNonEmpty bool `yaml:"allowNonEmpty,omitempty" json:"allowNonEmpty,omitempty"`
	// Block publishes the device node itself at path (a file, created if
	// missing): a raw block volume, one without a filesystem block.
	Block bool `yaml:"block,omitempty" json:"block,omitempty"`
}

// MountSpec is a `kind: Mount` consumer declared in its own file.
type MountSpec struct {
	Volume string `yaml:"volume" json:"volume"`
	Path   string `yaml:"path" json:"path"`
	// SubPath is a directory inside the volume, relative, resolved
	// without following any symlink.
	SubPath  string `yaml:"subPath,omitempty" json:"subPath,omitempty"`
	ReadOnly bool   `yaml:"readOnly,omitempty" json:"readOnly,omitempty"`
	NestedIn string `yaml:"nestedIn,omitempty" json:"nestedIn,omitempty"`
	// AllowNonEmpty: as in a Volume's mounts.
	AllowNonEmpty bool `yaml:"allowNonEmpty,omitempty" json:"allowNonEmpty,omitempty"`
}

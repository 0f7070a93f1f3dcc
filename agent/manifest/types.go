// Package manifest reads volumed's manifest files (apiVersion volumed/v1)
// from the drop-in directories, decodes them strictly and validates them.
package manifest

import "time"

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

type Metadata struct {
	Name string `yaml:"name" json:"name"`
}

type VolumeSpec struct {
	// State is "present" (default) or "absent" (tear down, keep the manifest).
	State      string      `yaml:"state,omitempty" json:"state,omitempty"`
	Source     Source      `yaml:"source" json:"source"`
	Filesystem *Filesystem `yaml:"filesystem,omitempty" json:"filesystem,omitempty"`
	Mounts     []Target    `yaml:"mounts,omitempty" json:"mounts,omitempty"`
}

// Source has exactly one member set.
type Source struct {
	Loop      *LoopSource      `yaml:"loop,omitempty" json:"loop,omitempty"`
	ISCSI     *ISCSISource     `yaml:"iscsi,omitempty" json:"iscsi,omitempty"`
	NVMe      *NVMeSource      `yaml:"nvme,omitempty" json:"nvme,omitempty"`
	Device    *DeviceSource    `yaml:"device,omitempty" json:"device,omitempty"`
	Directory *DirectorySource `yaml:"directory,omitempty" json:"directory,omitempty"`
	Tmpfs     *TmpfsSource     `yaml:"tmpfs,omitempty" json:"tmpfs,omitempty"`
}

type LoopSource struct {
	File     string      `yaml:"file" json:"file"`
	Create   *LoopCreate `yaml:"create,omitempty" json:"create,omitempty"`
	ReadOnly bool        `yaml:"readOnly,omitempty" json:"readOnly,omitempty"`
}

type LoopCreate struct {
	// Size as written ("10Gi", "64Mi", "1G", "1048576"); SizeBytes is the parsed value.
	Size      string `yaml:"size" json:"size"`
	SizeBytes int64  `yaml:"-" json:"-"`
	// Overcommit allows a size larger than the free space of the
	// filesystem holding the image. Off, such a size is refused: a
	// sparse image that runs out of room there corrupts the filesystem
	// inside it.
	Overcommit bool `yaml:"overcommit,omitempty" json:"overcommit,omitempty"`
}

type ISCSISource struct {
	Portal string `yaml:"portal" json:"portal"`
	IQN    string `yaml:"iqn" json:"iqn"`
	LUN    int    `yaml:"lun" json:"lun"`
	CHAP   *CHAP  `yaml:"chap,omitempty" json:"chap,omitempty"`
	// ReplacementTimeout is how long I/O is held while the session is
	// down before it fails ("120s"; empty: the driver's default).
	ReplacementTimeout  string        `yaml:"replacementTimeout,omitempty" json:"replacementTimeout,omitempty"`
	ReplacementTimeoutD time.Duration `yaml:"-" json:"-"`
}

// CHAP secrets are named by file only (root-owned, mode 0600 or stricter),
// never written in a manifest.
type CHAP struct {
	Username     string `yaml:"username" json:"username"`
	PasswordFile string `yaml:"passwordFile" json:"passwordFile"`
	// Mutual CHAP: the target proves itself to the initiator too.
	MutualUsername     string `yaml:"mutualUsername,omitempty" json:"mutualUsername,omitempty"`
	MutualPasswordFile string `yaml:"mutualPasswordFile,omitempty" json:"mutualPasswordFile,omitempty"`
}

type NVMeSource struct {
	Transport string `yaml:"transport" json:"transport"`
	Address   string `yaml:"address" json:"address"`
	Port      int    `yaml:"port,omitempty" json:"port,omitempty"`
	NQN       string `yaml:"nqn" json:"nqn"`
	Namespace int    `yaml:"namespace" json:"namespace"`
	// Durations as written ("30m", "10s"); empty: the driver's defaults,
	// chosen to ride out a network flap. The D fields hold the parsed values.
	CtrlLossTimeout   string        `yaml:"ctrlLossTimeout,omitempty" json:"ctrlLossTimeout,omitempty"`
	ReconnectDelay    string        `yaml:"reconnectDelay,omitempty" json:"reconnectDelay,omitempty"`
	KeepAliveTimeout  string        `yaml:"keepAliveTimeout,omitempty" json:"keepAliveTimeout,omitempty"`
	CtrlLossTimeoutD  time.Duration `yaml:"-" json:"-"`
	ReconnectDelayD   time.Duration `yaml:"-" json:"-"`
	KeepAliveTimeoutD time.Duration `yaml:"-" json:"-"`
	NrIOQueues        int           `yaml:"nrIOQueues,omitempty" json:"nrIOQueues,omitempty"`
	// DHCHAPSecretFile names a file (root-owned, 0600) holding the
	// DH-HMAC-CHAP host key ("DHHC-1:..."); the key is never written in a manifest.
	DHCHAPSecretFile string `yaml:"dhchapSecretFile,omitempty" json:"dhchapSecretFile,omitempty"`
}

type DeviceSource struct {
	Path   string `yaml:"path,omitempty" json:"path,omitempty"`
	Serial string `yaml:"serial,omitempty" json:"serial,omitempty"`
	WWN    string `yaml:"wwn,omitempty" json:"wwn,omitempty"`
}

type DirectorySource struct {
	Path   string     `yaml:"path" json:"path"`
	Create *DirCreate `yaml:"create,omitempty" json:"create,omitempty"`
}

type DirCreate struct {
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	UID  int    `yaml:"uid,omitempty" json:"uid,omitempty"`
	GID  int    `yaml:"gid,omitempty" json:"gid,omitempty"`
}

type TmpfsSource struct {
	Size      string `yaml:"size" json:"size"`
	SizeBytes int64  `yaml:"-" json:"-"`
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

// Driver names the attacher a source needs ("loop", "iscsi", ...).
func (s Source) Driver() string {
	switch {
	case s.Loop != nil:
		return "loop"
	case s.ISCSI != nil:
		return "iscsi"
	case s.NVMe != nil:
		return "nvme"
	case s.Device != nil:
		return "device"
	case s.Directory != nil:
		return "directory"
	case s.Tmpfs != nil:
		return "tmpfs"
	}
	return ""
}

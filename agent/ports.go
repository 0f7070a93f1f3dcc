// The core's ports: every interface the agent is handed (attachers and
// their optional parts, filesystems, mounts, encryption, the store, the
// manifests) and what crosses them, in one file. cmd/volumed wires the
// kinds' adapters and drivers/* behind them; the core never imports a
// driver.

package agent

import (
	"context"
	"errors"

	"github.com/moby/sys/mountinfo"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/blank"
	"github.com/volumed/volumed/internal/secret"
	"github.com/volumed/volumed/store"
)

// Attacher makes a volume's source available as a block device. One per
// driver name; each kind (kinds/<kind>, Kind.Attacher) adapts its
// driver to it, so the core never imports a driver.
type Attacher interface {
	// Find returns the attachments of the volume's source that exist now,
	// identified by stable identity (never by a device name alone).
	Find(ctx context.Context, v *Desired) ([]Found, error)
	// Attach attaches the source and returns what it made.
	Attach(ctx context.Context, v *Desired) (Found, error)
	// Verify reports whether the recorded attachment still exists with
	// the same identity, and its current device path.
	Verify(ctx context.Context, a store.Attachment) (device string, ok bool, err error)
	// Detach tears a recorded attachment down after checking its
	// identity. The core calls it only when the kernel object may go
	// (decide.MayRelease: what volumed made, and a session no other volume rides).
	Detach(ctx context.Context, a store.Attachment) error
}

// Found is one attachment of a source seen in the kernel.
type Found struct {
	Device   string
	Identity string
	// Session names the kernel object the attachment shares with others
	// of the same driver (an iSCSI session, an NVMe controller); "" if none.
	Session string
	// Owned: volumed made the kernel object (it carries volumed's marker,
	// e.g. a loop device's tag, or this Attach made it). It is a fact the
	// adapter reports, not a verdict: whether the volume owns the
	// attachment (may tear it down) is decide.Owns's call, which weighs
	// it with the session, the pin and a crash mid-attach.
	Owned bool
	// Reusable: an attachment found in place may be used as it is (a
	// session another tool or the firmware made, a local disk). Unless it
	// is owned, it is then never torn down. A loop device volumed did not
	// make is not reusable: two writers on one image corrupt it.
	Reusable bool
	// Pinned: the host booted from it (firmware tables); it is never torn
	// down, whatever the manifests say.
	Pinned bool
	// Created: this Attach created the source (a new sparse image
	// file); nobody else has written it.
	Created bool
	// Note says why this one was chosen among several (a disk selector
	// that matched more than one disk); the volume's status shows it.
	Note string
}

// Coplanner is implemented by attachers whose volumes are laid out
// together on one device (partitions of a disk): AttachAmong is Attach
// handed the other wanted volumes of its driver, so what one volume takes
// leaves the room the others ask for, whichever attaches first.
type Coplanner interface {
	AttachAmong(ctx context.Context, d *Desired, others []*Desired) (Found, error)
}

// Resizer is implemented by attachers whose device can grow in place:
// Grow makes the attachment at least as large as the manifest wants
// (a loop image extended) and tells the kernel to look again; it never
// shrinks anything. (Sizes changed on the target's side are re-read
// through Refresher.)
type Resizer interface {
	Grow(ctx context.Context, d *Desired, a store.Attachment) error
}

// SizeRounder is implemented by attachers whose source rounds the size
// asked for (an LV: up to its VG's extent size): Rounded is Caps.Size as
// the source would make it, so a growth check neither grows nor refuses
// a shrink over the rounding. It is asked at a growth check (a resync, a
// device event, a manifest change), never at every pass.
type SizeRounder interface {
	Rounded(ctx context.Context, d *Desired, a store.Attachment) (int64, error)
}

// HealthChecker is implemented by attachers whose source has a health
// of its own beyond the device (an LV: its thin pool filling up, its VG
// missing a disk). Health is asked at the resync's health check and at
// start-up, never in a reconcile pass: it may run a program.
type HealthChecker interface {
	Health(ctx context.Context, d *Desired, a store.Attachment) (SourceHealth, error)
}

// BackingChecker is implemented by attachers whose device reads a file
// that can change under it (a loop image deleted or replaced while the
// device keeps the old inode): CheckBacking says whether the file the
// attachment names is still the one the device uses. It is called at
// the resync, so it must be cheap (a stat, no device I/O).
type BackingChecker interface {
	// d is nil for a volume no manifest wants any more.
	CheckBacking(d *Desired, a store.Attachment) (*Problem, error)
}

// InUseChecker is implemented by attachers of local devices volumed
// uses in place but never made (a device path, a disk): InUse says what
// outside volumed uses the device (a mount, a holder, an exclusive
// open), nil when nothing does. Such a device is never attached.
type InUseChecker interface {
	InUse(device string) (*Problem, error)
}

// ErrBusy marks a teardown step the kernel refused because something
// still uses the mount or device; adapters wrap their drivers' busy
// errors with it so the core can name the holders.
var ErrBusy = errors.New("busy")

// NotActivated is an Attach error of a source that is there but would
// not activate (an LV lvm2 refuses to activate: a PV missing, its thin
// pool's check failed, a kernel target missing). Adapters wrap their
// drivers' errors in it so the volume gets a condition of its own
// (CondActivationFailed) with Reason, not only the attach's error.
type NotActivated struct {
	Reason string // e.g. PhysicalVolumeMissing
	Err    error  // what the tool said
}

func (e *NotActivated) Error() string { return e.Err.Error() }
func (e *NotActivated) Unwrap() error { return e.Err }

// Waiting is an Attach error of a source that is not there yet, saying
// what could bring it (decide.Awaited): a kernel event about anything
// else leaves the volume to its backoff (decide.Concerns), so devices
// coming and going, volumed's own among them, do not each retry it.
type Waiting struct {
	For Awaited
	Err error
}

func (e *Waiting) Error() string { return e.Err.Error() }
func (e *Waiting) Unwrap() error { return e.Err }

// Stager is implemented by sources that are not block devices (a host
// directory, a tmpfs): it puts the source at the staging path itself
// instead of a probe, format and mount.
type Stager interface {
	Stage(ctx context.Context, d *Desired, stagingPath string) error
	// IsStaged reports whether the mount at the staging path is this
	// source's (for reconstruction).
	IsStaged(d *Desired, stagingPath string) bool
}

// SelfNamedDetacher is implemented by attachers whose detach needs no
// intent: start-up tells a detached attachment from a live one by its
// identity alone (Verify), and finds one no record names by its marker
// (OrphanLister), so a crash anywhere in a detach leaves the kernel to
// say how far it got. A loop device is one; a network session, shared
// and carrying no marker, is not.
type SelfNamedDetacher interface {
	OrphanLister
	DetachNeedsNoIntent()
}

// Filesystems probes, formats and grows filesystems on block devices.
type Filesystems interface {
	// Probe lists every signature on the device (filesystems, partition
	// tables, LUKS, LVM, RAID, swap). An error means "unknown", never "blank".
	Probe(ctx context.Context, device string) ([]Signature, error)
	// Examine gathers the facts of the blank rule (internal/blank);
	// created says the attach created the source and nothing has
	// formatted it since.
	Examine(ctx context.Context, device string, created bool) (blank.Facts, error)
	// Mkfs makes the filesystem with the given UUID ("" lets mkfs choose).
	Mkfs(ctx context.Context, device, fstype, uuid string, extra []string) error
	// Inspect reads the filesystem's UUID, and whether it records having
	// been mounted, without mounting it.
	Inspect(ctx context.Context, device string) (FSInfo, error)
	// CheckReadOnly runs the filesystem's checker in its no-write mode.
	CheckReadOnly(ctx context.Context, fstype, device string) (FSCheck, error)
	Grow(ctx context.Context, fstype, device, mountpoint string) error
	// DeviceSize is the size of a block device in bytes, as the kernel
	// sees it now.
	DeviceSize(device string) (int64, error)
}

// FSCheck is a read-only checker's verdict.
type FSCheck int

// FSCheck values.
const (
	FSCheckUnknown FSCheck = iota // it could not tell
	FSCheckClean
	FSCheckDamaged
)

// ErrMountConfig marks a mount refused because of how it was asked for
// (an option, a permission, a path), never because of the filesystem.
var ErrMountConfig = errors.New("mount refused by its configuration")

// Mounter does mounts and reads the kernel's mount table.
type Mounter interface {
	MountDevice(device, target, fstype string, opts []string) error
	// Bind publishes subPath of the staging mount at target. Neither the
	// subPath nor the target is resolved through a symlink, so nothing
	// can redirect the mount outside what the manifest names.
	Bind(staging, subPath, target string, o BindOptions) error
	// BindDevice publishes a block device node at target, a file it
	// creates if missing, without following a symlink in target.
	BindDevice(device, target string, o BindOptions) error
	// Unmount removes the topmost mount at target and confirms it against
	// mountinfo; it fails (never pretends) when the target stays busy.
	Unmount(ctx context.Context, target string) error
	EnsureDir(path string) error
	// Remount changes the options of the filesystem mounted at target
	// (the mount mountID) from from (nil: unknown) to opts in place; the
	// filesystem may refuse.
	Remount(target string, mountID int, from, opts []string) error
	// SetBindOptions gives the mount mountID at target exactly the
	// per-mount flags of o.
	SetBindOptions(target string, mountID int, o BindOptions) error
	// Entries counts what the directory at path holds (0 if missing).
	Entries(path string) (int, error)
	// Mounts reads the whole mount table (start-up, drift checks).
	Mounts() (MountTable, error)
	// At says, in one syscall, which mount a path lands on and whether
	// something is mounted exactly there: the operations' hot path.
	At(path string) (MountPoint, error)
}

// MountTable is one consistent read of the kernel's mount table.
type MountTable interface {
	// Top is the mount a lookup of path lands on, among those mounted
	// exactly there: the top of the stack by parent links (file order is
	// not enough: propagation can tuck a mount underneath), or nil.
	Top(path string) *mountinfo.Info
	// All lists every mount in the kernel's order.
	All() []*mountinfo.Info
	// SameSource: m shows the filesystem of the mount of, at subPath
	// inside it (a target bound from a staging mount).
	SameSource(m, of *mountinfo.Info, subPath string) bool
}

// MountPoint is what the kernel says about where a path lands.
type MountPoint struct {
	MountID  int
	Root     bool // something is mounted exactly at this path
	Dev, Ino uint64
}

// SameFile: a bind mount's root is the same file as its source dir.
func (p MountPoint) SameFile(q MountPoint) bool { return p.Dev == q.Dev && p.Ino == q.Ino }

// Store is the persistence behind the actual state (package store).
type Store interface {
	Load() (map[string]*store.Volume, []store.Intent, error)
	Begin(in store.Intent) (uint64, error)
	// FinishLater records an outcome without waiting for its fsync:
	// losing it in a crash leaves the intent, which start-up resolves.
	// failed is told when the commit fails: the caller keeps the outcome.
	FinishLater(intentID uint64, name string, v *store.Volume, failed func(error)) error
	// RecordLater is FinishLater for an operation op that wrote no intent.
	RecordLater(op, name string, v *store.Volume, failed func(error)) error
	// Flush has what FinishLater queued committed now, without waiting.
	Flush()
	// Settle durably drops intents whose outcome a failed commit lost,
	// writing the volume's record as it is now.
	Settle(intentIDs []uint64, name string, v *store.Volume) error
	Put(v *store.Volume) error
	Delete(name string) error
	DropIntent(id uint64) error
	identityStore
}

// Manifests is the desired-state populator's source (manifest.Builder).
type Manifests interface {
	Load() *manifest.Result
}

// changedLoader is a Manifests that can read only the files a watch
// named (manifest.Builder.LoadChanged), with Load's answer.
type changedLoader interface {
	LoadChanged(paths []string) *manifest.Result
}

// Crypt formats, opens and closes the LUKS2 volumes of encrypted
// volumes (drivers/luks behind an adapter, wired by cmd/volumed). Keys
// are handed over as the manifest names them; the material never passes
// through the core.
type Crypt interface {
	// Inspect reads the LUKS2 headers on dev, without a key. intentUUID,
	// when set, is the UUID an interrupted encrypt was writing.
	Inspect(dev, intentUUID string) (LUKSHeader, error)
	// Format writes a LUKS2 header with every key enrolled; it refuses
	// (and writes nothing) unless dev is blank or holds exactly the
	// half-written header of o.UUID, and only enrols missing keys on a
	// whole header of o.UUID.
	Format(ctx context.Context, o CryptFormat) error
	// Open maps the LUKS2 volume on dev as name, or adopts the mapping
	// of that name when it is this header's on dev. None of the keys
	// opening it is an error that Is ErrLocked, whose text names the keys
	// (never their material) and why each failed.
	Open(ctx context.Context, o CryptOpen) (CryptOpened, error)
	// Adopt returns the mapping name when it is open and is the LUKS2
	// volume on dev (uuid, when set, its header's UUID); false when no
	// mapping has that name. It never opens anything.
	Adopt(ctx context.Context, dev, name, uuid string) (CryptOpened, bool, error)
	// Close removes the mapping name; one already gone is success.
	Close(ctx context.Context, name string) error
	// Resize makes the open mapping o.Name fill its device o.Device
	// again, with the first of o.Keys that opens the header.
	Resize(ctx context.Context, o CryptOpen) error
}

// RecoveryKeys is a Crypt that enrols recovery keys: a new key in a
// keyslot of its own, opened with the first of o.Keys that opens the
// header on o.Device (o.UUID's), returned to be shown once and kept
// nowhere.
type RecoveryKeys interface {
	AddRecoveryKey(ctx context.Context, o CryptOpen) (secret.Value, error)
}

// KeyServerWait is a locked error of Crypt that says which key servers
// did not answer ("waiting for tang server URL: <error>"; "" when none):
// the volume waits for them rather than for another key.
type KeyServerWait interface{ Waiting() string }

// CryptFormat is what an encrypt writes.
type CryptFormat struct {
	Device     string
	UUID       string
	Cipher     string
	SectorSize int
	PBKDF      string // manifest.PBKDFArgon2id or PBKDFPBKDF2
	Keys       []manifest.LUKS2Key
}

// CryptOpen names what to open and as what.
type CryptOpen struct {
	Device string
	Name   string
	UUID   string // the header UUID expected; "" for any
	Keys   []manifest.LUKS2Key
}

// CryptOpened is a mapping in place.
type CryptOpened struct {
	Device  string // /dev/mapper/<name>
	UUID    string // the LUKS2 UUID it maps
	Adopted bool   // it was open already
	KeyKind string // the kind of key that opened it; "" when adopted
}

// Refresher is implemented by attachers whose devices can change size on
// the far side (an iSCSI LUN, an NVMe namespace grown on the target):
// Refresh asks the kernel to read the size again.
type Refresher interface {
	Refresh(ctx context.Context, a store.Attachment) error
}

// Joiner is implemented by attachers whose source takes in new disks
// while in use (an LV in a VG volumed keeps with grow: true): Joinable
// says a disk is there to join it, so the volume's grow operation runs,
// intent first, though no size changed. It is asked at a growth check
// (the resync's, and one a block device's arrival asks for).
type Joiner interface {
	Joinable(ctx context.Context, d *Desired, a store.Attachment) (bool, error)
}

// OrphanLister is implemented by attachers that can list every
// attachment carrying volumed's marker, so that one left behind by a
// crash for a volume nobody wants any more can be torn down. What it
// lists is in the kernel as Verify would find it: a recorded attachment
// listed with the same identity and device is verified by the list.
type OrphanLister interface {
	ListOwned(ctx context.Context) ([]store.Attachment, error)
}

// LeftoverLister is implemented by attachers whose driver makes things
// that outlive an attachment (an inactive LV, a volume group): it lists
// those no volume of wanted names, each said in a line. The core logs
// them at start-up and never removes them: the data is the user's.
type LeftoverLister interface {
	ListLeftovers(ctx context.Context, wanted []*Desired) ([]string, error)
}

// identityStore keeps identities durably (store.Store).
type identityStore interface {
	Identities() (map[string]store.Identity, error)
	PutIdentity(id store.Identity) error
	DeleteIdentity(name string) error
}

// Package record holds the records of volumed's actual state as store
// keeps them: data alone, no database, so that a pure decision
// (agent/decide) can take them without being able to reach the store.
package record

import "time"

// Attachment is the device a volume is attached as.
type Attachment struct {
	// Kind is the source kind that attached it. The state file's key
	// stays "driver", the name of state files written before the rename.
	Kind     string `json:"driver"`
	Device   string `json:"device"`   // e.g. /dev/loop3 — a hint only, never trusted without Identity
	Identity string `json:"identity"` // stable identity, e.g. "loop:/img/a.img@2049:1234"
	Owned    bool   `json:"owned"`    // we created it, so we may tear it down
	// Session is the shared kernel object (iSCSI session, NVMe
	// controller) the attachment rides on; "" if none.
	Session string `json:"session,omitempty"`
	// Pinned: the host booted from it; never torn down.
	Pinned bool `json:"pinned,omitempty"`
	// Source is what the manifest's source named when it was attached
	// (e.g. a loop image's path): an edit to it cannot reach a live
	// attachment, and this lets the agent say so. "" in records written
	// before it was kept.
	Source string `json:"source,omitempty"`
	// Created: volumed made what is on the source: the attach created
	// it (a sparse image file), or volumed wrote a LUKS2 header on it,
	// whose fresh mapping reads as noise, not as zeros. It is blank by
	// this record until its first format or mount, which clear it.
	Created bool `json:"created,omitempty"`
}

// MountRecord is one mount the agent made or adopted.
type MountRecord struct {
	Path     string `json:"path"`
	Device   string `json:"device,omitempty"`
	FSType   string `json:"fsType,omitempty"`
	SubPath  string `json:"subPath,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	MountID  int    `json:"mountID,omitempty"` // hint; verified against mountinfo
	Owned    bool   `json:"owned"`
	// DeviceBytes (staging mounts) is the device's size when its
	// filesystem was last mounted or grown: a larger device now means
	// the filesystem can grow.
	DeviceBytes int64 `json:"deviceBytes,omitempty"`
	// Options are the mount options the mount was made (or last
	// remounted) with, so that a manifest edit to them is seen; nil when
	// unknown (a mount adopted from the kernel, a record written before
	// they were kept).
	Options []string `json:"options,omitempty"`
	// Refused: a live remount to these options failed; it is not tried
	// again until the manifest asks for something else.
	Refused *Refusal `json:"refused,omitempty"`
}

// Refusal is a live change the kernel refused.
type Refusal struct {
	Options []string `json:"options"`
	Error   string   `json:"error"`
}

// Mapping is the dm-crypt mapping an encrypted volume is open as, on
// top of its attachment. Never a key: only which kind of key opened it.
type Mapping struct {
	Name   string `json:"name"`   // device-mapper name, volumed-<volume>
	UUID   string `json:"uuid"`   // the LUKS2 header's UUID
	Device string `json:"device"` // /dev/mapper/<name>: what is formatted and mounted
	// KeyKind is the kind of key that opened it ("file", "tpm2", "tang"); ""
	// when it was found open (adopted) and no record said.
	KeyKind string `json:"keyKind,omitempty"`
	// HeaderBytes is how much smaller than the device the mapping is
	// (the LUKS2 header): a device that grows beyond it grows the
	// mapping. 0 when unknown.
	HeaderBytes int64 `json:"headerBytes,omitempty"`
}

// Volume is the recorded actual state of one volume.
type Volume struct {
	Name string `json:"name"`
	// Kind is the volume's source kind (the key stays "driver", as in
	// Attachment).
	Kind       string      `json:"driver"`
	Attachment *Attachment `json:"attachment,omitempty"`
	// Mapping is set while an encrypted volume is open.
	Mapping   *Mapping      `json:"mapping,omitempty"`
	Staging   *MountRecord  `json:"staging,omitempty"`
	Targets   []MountRecord `json:"targets,omitempty"`
	UpdatedAt time.Time     `json:"updatedAt"`
}

// Intent is an operation that was started; while it exists its outcome is uncertain.
type Intent struct {
	ID        uint64            `json:"id"`
	Volume    string            `json:"volume"`
	Op        string            `json:"op"`               // attach, encrypt, open, format, mount_device, publish, unpublish, unmount_device, close, detach, grow, remount
	Inputs    map[string]string `json:"inputs,omitempty"` // never secrets
	StartedAt time.Time         `json:"startedAt"`
}

// Identity is the filesystem (and LUKS header) a volume's data lives in.
type Identity struct {
	Volume string `json:"volume"`
	// Source is the attachment key of the source it was found on: an
	// identity of another source (the manifest was edited) says nothing.
	Source string `json:"source"`
	// Filesystem is the filesystem UUID; "" when not known yet.
	Filesystem string `json:"filesystem,omitempty"`
	// LUKS is the LUKS2 header's UUID of an encrypted volume.
	LUKS string `json:"luks,omitempty"`
	// How says how it was learnt: "formatted" or "adopted".
	How       string    `json:"how"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Package api holds the JSON shapes of volumed's local API (the unix
// socket the CLI talks to) and a small client for it. The JSON field
// names are stable: scripts depend on `volumed status -o json`.
package api

import "time"

// Phases of a volume.
const (
	PhasePending    = "Pending"
	PhaseAttaching  = "Attaching"
	PhaseAttached   = "Attached"
	PhaseFormatting = "Formatting"
	PhaseMounting   = "Mounting"
	PhaseReady      = "Ready"
	PhaseUnmounting = "Unmounting"
	PhaseDetaching  = "Detaching"
	PhaseError      = "Error"
	PhaseUncertain  = "Uncertain"
	// PhaseAbsent: the manifest says `state: absent` and nothing is left.
	PhaseAbsent = "Absent"
	// PhaseDegraded: the volume is in place (mounted where the manifest
	// says) but a condition says something is wrong with it.
	PhaseDegraded = "Degraded"
)

// Condition is one thing wrong with a volume, and since when.
type Condition struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
}

// Volume is one entry of `volumed status -o json`.
type Volume struct {
	Name          string     `json:"name"`
	Kind          string     `json:"kind"`
	Driver        string     `json:"driver"`
	Phase         string     `json:"phase"`
	Device        string     `json:"device"`
	StagingPath   string     `json:"stagingPath"`
	Targets       []Target   `json:"targets"`
	LastError     string     `json:"lastError"`
	Retries       int        `json:"retries"`
	NextRetryAt   *time.Time `json:"nextRetryAt"`
	File          string     `json:"file"` // the manifest file that declares it; "" when none does any more
	CapacityBytes int64      `json:"capacityBytes"`
	UsedBytes     int64      `json:"usedBytes"`
	// Wanted is false for a volume whose manifest is gone or says absent
	// and which is being (or has been) torn down.
	Wanted bool `json:"wanted"`
	// Pinned: the host booted from this volume's source (firmware
	// tables); it is never torn down.
	Pinned bool `json:"pinned,omitempty"`
	// SourceDetail says what the device stands on, where its kind tells (an
	// LV: "LV vg0/data in VG vg0, thin in pool vg0/pool"), as of the last
	// health check.
	SourceDetail string `json:"sourceDetail,omitempty"`
	// Encryption is set for an encrypted volume (never a key).
	Encryption *Encryption `json:"encryption,omitempty"`
	// Conditions say what is wrong; a Ready volume has none.
	Conditions []Condition `json:"conditions"`
	Events     []Event     `json:"events,omitempty"`
}

// Encryption states.
const (
	EncryptionOpen   = "open"   // the dm-crypt mapping is in place
	EncryptionLocked = "locked" // none of its keys opens the header
	EncryptionClosed = "closed" // not opened (yet, or any more)
)

// Encryption is how an encrypted volume stands. Device (the volume's)
// stays the attached block device; Mapping is what is mounted.
type Encryption struct {
	State   string `json:"state"`             // open | locked | closed
	Mapping string `json:"mapping,omitempty"` // /dev/mapper/volumed-<name>, while open
	UUID    string `json:"uuid,omitempty"`    // the LUKS2 header's, while open
	// KeyKind is the kind of key that opened it (file, tpm2, tang); empty when
	// it was found open after a restart and no record said.
	KeyKind string `json:"keyKind,omitempty"`
}

// Target is one place a volume is published.
type Target struct {
	Path     string `json:"path"`
	Mounted  bool   `json:"mounted"`
	ReadOnly bool   `json:"readOnly"`
	SubPath  string `json:"subPath,omitempty"`
}

// Event is one finished operation, newest last.
type Event struct {
	Time     time.Time `json:"time"`
	Op       string    `json:"op"`
	Result   string    `json:"result"` // success | error
	Duration float64   `json:"durationSeconds"`
	Error    string    `json:"error,omitempty"`
}

// Status is the reply of GET /v1/status.
type Status struct {
	Volumes []Volume `json:"volumes"`
	// Problems are the manifest problems right now, "file:line:col: field: reason".
	Problems []string `json:"problems"`
	// StateRecovery is set when the state file was damaged and moved aside at start-up.
	StateRecovery string `json:"stateRecovery,omitempty"`
	// Settled: no operation is running or due; every volume is where the
	// manifests want it or waiting out a backoff.
	Settled bool `json:"settled"`
	// Host is the identity volumed presents to storage targets.
	Host HostIdentity `json:"host"`
	// BootVolumes are the volumes the firmware says the host booted
	// from; they are pinned: never torn down.
	BootVolumes []BootVolume `json:"bootVolumes,omitempty"`
	// NetworkHeld: `volumed shutdown --network` was run; network volumes
	// stay down until the agent exits.
	NetworkHeld bool `json:"networkHeld,omitempty"`
}

// HostIdentity names the host to iSCSI and NVMe-oF targets, and where
// each name came from.
type HostIdentity struct {
	InitiatorName     string `json:"initiatorName"`
	InitiatorNameFrom string `json:"initiatorNameFrom"`
	HostNQN           string `json:"hostNQN"`
	HostNQNFrom       string `json:"hostNQNFrom"`
	HostID            string `json:"hostID"`
	HostIDFrom        string `json:"hostIDFrom"`
}

// BootVolume is one volume from a boot firmware table (iBFT, NBFT).
type BootVolume struct {
	Driver string `json:"driver"` // iscsi | nvme
	From   string `json:"from"`   // e.g. "ibft target0"
	Target string `json:"target"` // e.g. "iqn.2026-01.x:boot at 192.0.2.1:3260 lun 0"
	// Volume is the manifest volume on it, if any.
	Volume string `json:"volume,omitempty"`
}

// RecoveryKeyReply is the reply of POST /v1/volumes/NAME/recovery-key:
// the new recovery key, enrolled, shown this once and kept nowhere.
type RecoveryKeyReply struct {
	Key string `json:"key"`
}

// ShutdownReply is the reply of POST /v1/shutdown-network.
type ShutdownReply struct {
	// Down lists the network volumes torn down; Remaining those that
	// could not be (with their last error), and Pinned those never
	// touched because the host booted from them.
	Down      []string `json:"down"`
	Remaining []string `json:"remaining"`
	Pinned    []string `json:"pinned"`
}

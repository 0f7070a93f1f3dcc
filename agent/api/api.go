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
)

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
	Source        string     `json:"source"`
	CapacityBytes int64      `json:"capacityBytes"`
	UsedBytes     int64      `json:"usedBytes"`
	// Wanted is false for a volume whose manifest is gone or says absent
	// and which is being (or has been) torn down.
	Wanted bool    `json:"wanted"`
	Events []Event `json:"events,omitempty"`
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
}

// The decisions' data, under the names the agent's ports and the kinds
// have always used: the types live in agent/decide, which must be able
// to take them without importing the agent.

package agent

import "github.com/volumed/volumed/agent/decide"

type (
	// Desired is what the manifests want of one volume.
	Desired = decide.Desired
	// DesiredTarget is one place the volume is published.
	DesiredTarget = decide.DesiredTarget
	// Op is the next step for one volume.
	Op = decide.Op
	// Problem is something wrong that a check found.
	Problem = decide.Problem
	// Signature is one thing found on a device.
	Signature = decide.Signature
	// FSInfo is what a filesystem says of itself without being mounted.
	FSInfo = decide.FSInfo
	// LUKSHeader is what a device's LUKS2 headers say, without a key.
	LUKSHeader = decide.LUKSHeader
	// BindOptions are the flags a publish applies to its bind mount.
	BindOptions = decide.BindOptions
	// DeviceEvent is a block device's kernel event and its facts.
	DeviceEvent = decide.DeviceEvent
	// Awaited is what could bring a volume whose attach waits.
	Awaited = decide.Awaited
)

// Operation names, as they appear in intents, logs and metrics.
const (
	OpAttach        = decide.OpAttach
	OpOpen          = decide.OpOpen
	OpEncrypt       = decide.OpEncrypt
	OpClose         = decide.OpClose
	OpFormat        = decide.OpFormat
	OpMountDevice   = decide.OpMountDevice
	OpPublish       = decide.OpPublish
	OpUnpublish     = decide.OpUnpublish
	OpUnmountDevice = decide.OpUnmountDevice
	OpDetach        = decide.OpDetach
	OpGrow          = decide.OpGrow
	OpRemount       = decide.OpRemount
)

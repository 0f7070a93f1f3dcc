package decide

import "slices"

// Block device event actions, as the kernel names them.
const (
	DeviceAdd    = "add"
	DeviceChange = "change"
	DeviceRemove = "remove"
)

// DeviceEvent is a block device's kernel event with what sysfs said of
// the device when it came (nothing, for a device removed).
type DeviceEvent struct {
	Action string // DeviceAdd, DeviceChange or DeviceRemove
	Name   string // the kernel's name, e.g. sdb, dm-3
	// Keys are the identities the device answers to, in the form a
	// waiting source states them (drivers/device.Keys): its node path,
	// and a whole disk's serial and WWNs.
	Keys []string
	// VG is the volume group of an LV's device ("" for any other).
	VG string
	// Empty: the device has no size yet (a loop device not bound, a dm
	// device whose table is not loaded): nothing can use it.
	Empty bool
	// Ours: volumed made or holds it (a device a record names, a LUKS
	// mapping of volumed's): its events are volumed's own work.
	Ours bool
	// Held: another block device holds it (a dm table over it: an LV on
	// a PV, a LUKS mapping): it can be neither picked nor made a PV.
	Held bool
}

// Awaited is what a volume whose attach waits could be brought by, as
// its kind states it with the wait (agent.Waiting). A volume whose wait
// says nothing (nil) is retried at every device added or removed.
type Awaited struct {
	// Keys: the device with one of these identities (drivers/device.Keys).
	Keys []string
	// LVsOf: an LV of this volume group (a thin pool, an LV activated).
	LVsOf string
	// AnyDisk: any device that is neither volumed's nor an LV (lvm2 does
	// not scan LVs for PVs): a disk a selector may pick, a new PV.
	AnyDisk bool
	// Release: the device is there but something outside volumed holds
	// it; a device going may be that holder.
	Release bool
}

// Concerns is the one rule for whether a block device's event could
// bring what a waiting volume waits for, so that it is retried now
// rather than at the end of its backoff. A device of volumed's own
// (its loop devices, LUKS mappings, the LVs of other VGs) never could,
// nor one something holds (a PV whose metadata an lvcreate rewrote);
// an empty one (added, its table or backing not there yet) is told of
// again by its change event when it is usable.
func Concerns(ev DeviceEvent, w *Awaited) bool {
	if w == nil {
		// The wait stated nothing: as before the kinds stated them.
		return ev.Action == DeviceAdd || ev.Action == DeviceRemove
	}
	switch ev.Action {
	case DeviceRemove:
		return w.Release && !ev.Ours
	case DeviceAdd, DeviceChange:
		if ev.Empty {
			return false
		}
		for _, k := range ev.Keys {
			if slices.Contains(w.Keys, k) {
				return true
			}
		}
		if ev.Ours || ev.Held {
			return false
		}
		if ev.VG != "" {
			return ev.VG == w.LVsOf
		}
		return w.AnyDisk
	}
	return false
}

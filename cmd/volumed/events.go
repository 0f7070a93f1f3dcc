package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/api"
	devicedrv "github.com/volumed/volumed/drivers/device"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/internal/linkwatch"
	"github.com/volumed/volumed/internal/sysfs"
	"github.com/volumed/volumed/internal/uevent"
	"github.com/volumed/volumed/kinds/iscsi"
)

// watchKernel turns kernel events into wakes for the agent: a block
// device that appears may be a disk or LUN a volume waits for, one that
// goes may be drift, one that changes may have grown; a link that comes
// up lets network volumes retry now instead of at the end of a backoff.
// Both watchers stop with ctx. Without them the agent still converges,
// at its retries and resyncs.
//
// awaitDisk names the drivers whose volumes wait for a block device,
// networkDrivers those that need the network (kinds.AwaitDisk, kinds.Network).
func watchKernel(ctx context.Context, log *slog.Logger, awaitDisk, networkDrivers []string) <-chan agent.Wake {
	// A dropped wake's drift and size checks wait for the resync, as
	// they always did; the waiting volumes it may have concerned retry.
	q := newWakeQueue(ctx, 16, agent.Wake{Reason: "kernel events dropped: retrying waiting volumes",
		Drivers: slices.Concat(awaitDisk, networkDrivers)})
	send := q.send
	l, err := uevent.Listen(ctx, func(e uevent.Event) bool { return e.Subsystem == "block" || e.Action == uevent.Overflow })
	if err != nil {
		log.Warn("no kernel uevents; device arrival is noticed at retries and resyncs", "error", err)
	} else {
		go func() {
			for ev := range l.C() {
				// Read at most once, and only if a volume waits: the
				// agent's wake asks (Wake.Facts).
				facts := func() *agent.DeviceEvent { return deviceEvent(ev, "/sys", log) }
				if w, ok := blockWake(ev, awaitDisk, facts); ok {
					send(w)
				}
			}
		}()
	}
	err = linkwatch.Watch(ctx, func(c linkwatch.Change) {
		switch {
		case c.Rescan:
			send(agent.Wake{Reason: "link messages lost: rescan", Drivers: networkDrivers})
		case c.Up:
			log.Info("link up", "link", c.Name)
			send(agent.Wake{Reason: "link up: " + c.Name, Drivers: networkDrivers})
		default:
			log.Info("link down", "link", c.Name)
		}
	})
	if err != nil {
		log.Warn("no link events; network volumes retry at their backoff", "error", err)
	}
	return q.c
}

// blockWake is what a block uevent wakes. A device that goes may be
// drift, and may also be what held a disk a volume waits for (a dm
// table, an LVM volume, a LUKS mapping removed): the volumes refused as
// InUse retry now, as their condition promises, not at the end of a
// backoff of up to two minutes. facts reads the device's (deviceEvent),
// if a volume waits: it retries only for an event that could bring what
// it waits for (decide.Concerns).
func blockWake(ev uevent.Event, awaitDisk []string, facts func() *agent.DeviceEvent) (agent.Wake, bool) {
	switch ev.Action {
	case uevent.Overflow:
		return agent.Wake{Reason: "uevents lost: rescan", Drivers: awaitDisk, Verify: true, Grow: true}, true
	case "add":
		return agent.Wake{Reason: "block device added: " + ev.DevName, Drivers: awaitDisk, Added: true, Facts: facts}, true
	case "remove":
		return agent.Wake{Reason: "block device removed: " + ev.DevName, Drivers: awaitDisk, Verify: true, Device: ev.DevName, Facts: facts,
			Unplugged: !strings.HasPrefix(ev.DevPath, "/devices/virtual/")}, true
	case "change":
		// A device usable only now (a dm table resumed, a loop device
		// bound), or written to be one (pvcreate), for the waits that
		// say so.
		return agent.Wake{Reason: "block device changed: " + ev.DevName, Drivers: awaitDisk, Grow: true, Device: ev.DevName, Facts: facts}, true
	}
	return agent.Wake{}, false
}

// deviceEvent reads the facts of a block device's event from sysfs
// (under sys): its identities, whether it is an LV or a LUKS mapping of
// volumed's, whether something holds it, whether it has a size yet. A
// device gone before it was read is empty: it brings nothing.
func deviceEvent(ev uevent.Event, sys string, log *slog.Logger) *agent.DeviceEvent {
	e := &agent.DeviceEvent{Action: ev.Action, Name: filepath.Base(ev.DevName)}
	if ev.Action == "remove" {
		return e // nothing left to read; Ours is the records' to say
	}
	dir := filepath.Join(sys, ev.DevPath)
	size, err := sysfs.Size(dir)
	if err != nil {
		log.Debug("block device's size unreadable: taken as gone", "device", ev.DevName, "error", err)
		e.Empty = true
		return e
	}
	keys, err := devicedrv.Keys(dir)
	if err != nil {
		// What was read (its node at least) still names it.
		log.Debug("block device's identities unreadable", "device", ev.DevName, "error", err)
	}
	holders, _ := sysfs.Holders(dir)
	e.Keys, e.Empty, e.VG, e.Held = keys, size == 0, lvmdrv.GroupOf(dir), len(holders) > 0
	e.Ours = strings.HasPrefix(sysfs.AttrOr(dir, "dm", "name"), agent.MappingName(""))
	return e
}

func apiHost(h firmware.HostIdentity) api.HostIdentity {
	return api.HostIdentity{
		InitiatorName: h.InitiatorName, InitiatorNameFrom: h.InitiatorNameFrom,
		HostNQN: h.HostNQN, HostNQNFrom: h.HostNQNFrom, HostID: h.HostID, HostIDFrom: h.HostIDFrom,
	}
}

func bootTarget(b firmware.BootVolume) string {
	if b.Driver == iscsi.Name {
		return fmt.Sprintf("%s at %s lun %d", b.IQN, b.Portal, b.LUN)
	}
	return fmt.Sprintf("%s at %s %s:%d nsid %d", b.NQN, b.Transport, b.Address, b.Port, b.NSID)
}

func apiBoot(bs []firmware.BootVolume) []api.BootVolume {
	out := make([]api.BootVolume, 0, len(bs))
	for _, b := range bs {
		out = append(out, api.BootVolume{Driver: b.Driver, From: b.Source, Target: bootTarget(b)})
	}
	return out
}

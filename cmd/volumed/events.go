package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/internal/linkwatch"
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
	wakes := make(chan agent.Wake, 16)
	send := func(w agent.Wake) {
		select {
		case wakes <- w:
		default:
			// 16 wakes queued already: the passes they cause retry every
			// waiting volume, and the resync checks sizes and drift.
		}
	}
	l, err := uevent.Listen(ctx, func(e uevent.Event) bool { return e.Subsystem == "block" || e.Action == uevent.Overflow })
	if err != nil {
		log.Warn("no kernel uevents; device arrival is noticed at retries and resyncs", "error", err)
	} else {
		go func() {
			for ev := range l.C() {
				if w, ok := blockWake(ev, awaitDisk); ok {
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
	return wakes
}

// blockWake is what a block uevent wakes. A device that goes may be
// drift, and may also be what held a disk a volume waits for (a dm
// table, an LVM volume, a LUKS mapping removed): the volumes refused as
// InUse retry now, as their condition promises, not at the end of a
// backoff of up to two minutes.
func blockWake(ev uevent.Event, awaitDisk []string) (agent.Wake, bool) {
	switch ev.Action {
	case uevent.Overflow:
		return agent.Wake{Reason: "uevents lost: rescan", Drivers: awaitDisk, Verify: true, Grow: true}, true
	case "add":
		return agent.Wake{Reason: "block device added: " + ev.DevName, Drivers: awaitDisk, Added: true}, true
	case "remove":
		return agent.Wake{Reason: "block device removed: " + ev.DevName, Drivers: awaitDisk, Verify: true, Device: ev.DevName,
			Unplugged: !strings.HasPrefix(ev.DevPath, "/devices/virtual/")}, true
	case "change":
		return agent.Wake{Reason: "block device changed: " + ev.DevName, Grow: true, Device: ev.DevName}, true
	}
	return agent.Wake{}, false
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

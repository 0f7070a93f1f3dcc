package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/drivers/device"
	"github.com/volumed/volumed/drivers/iscsi"
	"github.com/volumed/volumed/drivers/nvme"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/store"
)

// sessionShared: another volume still rides the session (an NVMe
// controller, an iSCSI session) a detaching attachment uses.
func sessionShared(a store.Attachment, others []store.Attachment) bool {
	return a.Session != "" && slices.ContainsFunc(others, func(o store.Attachment) bool { return o.Session == a.Session })
}

// nvmeAttacher adapts drivers/nvme. The host presents its stable identity
// (hostnqn, hostid); namespaces the host booted from are pinned.
type nvmeAttacher struct {
	c    *nvme.Client
	host firmware.HostIdentity
	boot []firmware.BootVolume
}

func nvmeTarget(s *agent.Desired) nvme.Target {
	n := s.Spec.Source.NVMe
	return nvme.Target{Transport: n.Transport, Address: n.Address, Port: n.Port, NQN: n.NQN}
}

func (a nvmeAttacher) found(ns nvme.Namespace, made bool) agent.Found {
	return agent.Found{
		Device: ns.Device, Identity: ns.Identity(), Session: ns.Target.Key(),
		Owned: made, Reusable: true, Pinned: firmware.PinnedNVMe(a.boot, ns.Target.NQN),
	}
}

func (a nvmeAttacher) Find(ctx context.Context, d *agent.Desired) ([]agent.Found, error) {
	ns, ok, err := a.c.Find(ctx, nvmeTarget(d), d.Spec.Source.NVMe.Namespace)
	if err != nil || !ok {
		return nil, err
	}
	return []agent.Found{a.found(ns, false)}, nil
}

func (a nvmeAttacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	n := d.Spec.Source.NVMe
	ns, err := a.c.Connect(ctx, nvme.Options{
		Target: nvmeTarget(d), Namespace: n.Namespace,
		HostNQN: a.host.HostNQN, HostID: a.host.HostID,
		CtrlLossTmo: n.CtrlLossTimeoutD, ReconnectDelay: n.ReconnectDelayD, KeepAliveTmo: n.KeepAliveTimeoutD,
		NrIOQueues: n.NrIOQueues, DHCHAPSecretFile: n.DHCHAPSecretFile,
	})
	if err != nil {
		return agent.Found{}, err
	}
	return a.found(ns, ns.NewController), nil
}

func (a nvmeAttacher) Verify(ctx context.Context, at store.Attachment) (string, bool, error) {
	t, nsid, err := nvme.ParseIdentity(at.Identity)
	if err != nil {
		return "", false, err
	}
	ns, ok, err := a.c.Find(ctx, t, nsid)
	return ns.Device, ok, err
}

func (a nvmeAttacher) Detach(ctx context.Context, at store.Attachment, others []store.Attachment) error {
	if at.Pinned || sessionShared(at, others) {
		return nil
	}
	t, _, err := nvme.ParseIdentity(at.Identity)
	if err != nil {
		return err
	}
	if firmware.PinnedNVMe(a.boot, t.NQN) {
		return nil
	}
	return markBusy(a.c.Disconnect(ctx, t), nvme.ErrBusy)
}

// Refresh has the controller rescan, so a namespace the target grew
// shows its new size (the kernel also does on the target's notice).
func (a nvmeAttacher) Refresh(ctx context.Context, at store.Attachment) error {
	t, nsid, err := nvme.ParseIdentity(at.Identity)
	if err != nil {
		return err
	}
	ns, ok, err := a.c.Find(ctx, t, nsid)
	if err != nil || !ok {
		return err
	}
	return a.c.Rescan(ns.Controller)
}

// iscsiAttacher adapts drivers/iscsi.
type iscsiAttacher struct {
	c    *iscsi.Client
	host firmware.HostIdentity
	boot []firmware.BootVolume
}

func iscsiTarget(d *agent.Desired) iscsi.Target {
	s := d.Spec.Source.ISCSI
	return iscsi.Target{Portal: s.Portal, IQN: s.IQN}
}

// parseISCSIIdentity reads "iscsi:IQN@portal:lunN" (iscsi.Identity) back.
func parseISCSIIdentity(id string) (iscsi.Target, int, error) {
	rest, ok := strings.CutPrefix(id, "iscsi:")
	at := strings.LastIndex(rest, "@")
	lunAt := strings.LastIndex(rest, ":lun")
	if !ok || at < 0 || lunAt < at {
		return iscsi.Target{}, 0, fmt.Errorf("not an iSCSI identity: %q", id)
	}
	var lun int
	if _, err := fmt.Sscanf(rest[lunAt+4:], "%d", &lun); err != nil {
		return iscsi.Target{}, 0, fmt.Errorf("not an iSCSI identity: %q", id)
	}
	return iscsi.Target{IQN: rest[:at], Portal: rest[at+1 : lunAt]}, lun, nil
}

func (a iscsiAttacher) found(t iscsi.Target, disk iscsi.Disk, made bool) agent.Found {
	return agent.Found{
		Device: disk.Device, Identity: disk.Identity(), Session: t.Key(),
		Owned: made, Reusable: true, Pinned: firmware.PinnedISCSI(a.boot, t.IQN),
	}
}

func (a iscsiAttacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	t := iscsiTarget(d)
	disk, ok, err := a.c.Find(t, d.Spec.Source.ISCSI.LUN)
	if err != nil || !ok {
		return nil, err
	}
	return []agent.Found{a.found(t, disk, false)}, nil
}

func (a iscsiAttacher) hasSession(t iscsi.Target) bool {
	ss, err := a.c.Sessions()
	return err == nil && slices.ContainsFunc(ss, func(s iscsi.Session) bool { return s.Target.Key() == t.Key() })
}

func (a iscsiAttacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	s := d.Spec.Source.ISCSI
	t := iscsiTarget(d)
	o := iscsi.Options{Target: t, LUN: s.LUN, ReplacementTimeout: s.ReplacementTimeoutD}
	if c := s.CHAP; c != nil {
		o.CHAP = &iscsi.CHAP{Username: c.Username, PasswordFile: c.PasswordFile, MutualUsername: c.MutualUsername, MutualPasswordFile: c.MutualPasswordFile}
	}
	// iscsid uses the host's initiator name file; only a name that came
	// from elsewhere (firmware, DMI) is passed explicitly.
	if a.host.InitiatorNameFrom != firmware.FromInitiatorFile {
		o.InitiatorName = a.host.InitiatorName
	}
	existed := a.hasSession(t)
	disk, err := a.c.Login(ctx, o)
	if err != nil {
		return agent.Found{}, err
	}
	return a.found(t, disk, !existed), nil
}

func (a iscsiAttacher) Verify(_ context.Context, at store.Attachment) (string, bool, error) {
	t, lun, err := parseISCSIIdentity(at.Identity)
	if err != nil {
		return "", false, err
	}
	disk, ok, err := a.c.Find(t, lun)
	return disk.Device, ok, err
}

func (a iscsiAttacher) Detach(ctx context.Context, at store.Attachment, others []store.Attachment) error {
	if at.Pinned || sessionShared(at, others) {
		return nil
	}
	t, _, err := parseISCSIIdentity(at.Identity)
	if err != nil {
		return err
	}
	if firmware.PinnedISCSI(a.boot, t.IQN) {
		return nil
	}
	return markBusy(a.c.Logout(ctx, t), iscsi.ErrBusy)
}

// Refresh rescans the session: a LUN grown on the target keeps its old
// size on the initiator until the SCSI disk is read again.
func (a iscsiAttacher) Refresh(ctx context.Context, at store.Attachment) error {
	t, _, err := parseISCSIIdentity(at.Identity)
	if err != nil {
		return err
	}
	return a.c.Rescan(ctx, t)
}

// deviceAttacher adapts drivers/device: a local disk, never detached.
type deviceAttacher struct{ f device.Finder }

func selector(d *agent.Desired) device.Selector {
	s := d.Spec.Source.Device
	return device.Selector{Path: s.Path, Serial: s.Serial, WWN: s.WWN}
}

func (a deviceAttacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	sel := selector(d)
	disk, ok, err := a.f.Find(sel)
	if err != nil || !ok {
		return nil, err
	}
	return []agent.Found{{Device: disk.Device, Identity: device.Identity(sel), Reusable: true}}, nil
}

// Attach is reached only when Find saw no disk: there is nothing to
// attach, so the volume waits (a uevent retries it at once).
func (a deviceAttacher) Attach(_ context.Context, d *agent.Desired) (agent.Found, error) {
	return agent.Found{}, fmt.Errorf("waiting for the disk (%s) to appear", device.Identity(selector(d)))
}

func selectorOf(identity string) (device.Selector, error) {
	kind, val, ok := strings.Cut(strings.TrimPrefix(identity, "device:"), ":")
	switch {
	case !ok || !strings.HasPrefix(identity, "device:"):
	case kind == "path":
		return device.Selector{Path: val}, nil
	case kind == "serial":
		return device.Selector{Serial: val}, nil
	case kind == "wwn":
		return device.Selector{WWN: val}, nil
	}
	return device.Selector{}, fmt.Errorf("not a device identity: %q", identity)
}

func (a deviceAttacher) Verify(_ context.Context, at store.Attachment) (string, bool, error) {
	sel, err := selectorOf(at.Identity)
	if err != nil {
		return "", false, err
	}
	disk, ok, err := a.f.Find(sel)
	return disk.Device, ok, err
}

func (deviceAttacher) Detach(context.Context, store.Attachment, []store.Attachment) error { return nil }

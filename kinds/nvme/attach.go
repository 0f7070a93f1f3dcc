package nvme

import (
	"context"

	"github.com/volumed/volumed/agent"
	nvmedrv "github.com/volumed/volumed/drivers/nvme"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// attacher adapts drivers/nvmedrv. The host presents its stable identity
// (hostnqn, hostid); namespaces the host booted from are pinned.
type attacher struct {
	c    *nvmedrv.Client
	host firmware.HostIdentity
	boot []firmware.BootVolume
}

func target(n *Source) nvmedrv.Target {
	return nvmedrv.Target{Transport: n.Transport, Address: n.Address, Port: n.Port, NQN: n.NQN}
}

func (a attacher) found(ns nvmedrv.Namespace, owned bool) agent.Found {
	return agent.Found{
		Device: ns.Device, Identity: ns.Identity(), Session: ns.Target.Key(),
		Owned: owned, Reusable: true, Pinned: firmware.PinnedNVMe(a.boot, ns.Target.NQN),
	}
}

func (a attacher) Find(ctx context.Context, d *agent.Desired) ([]agent.Found, error) {
	n, err := kind.Spec[Source](d, Name)
	if err != nil {
		return nil, err
	}
	ns, ok, err := a.c.Find(ctx, target(n), n.Namespace)
	if err != nil || !ok {
		return nil, err
	}
	return []agent.Found{a.found(ns, false)}, nil
}

func (a attacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	n, err := kind.Spec[Source](d, Name)
	if err != nil {
		return agent.Found{}, err
	}
	ns, err := a.c.Connect(ctx, nvmedrv.Options{
		Target: target(n), Namespace: n.Namespace,
		HostNQN: a.host.HostNQN, HostID: a.host.HostID,
		CtrlLossTmo: n.CtrlLossTimeoutD, ReconnectDelay: n.ReconnectDelayD, KeepAliveTmo: n.KeepAliveTimeoutD,
		NrIOQueues: n.NrIOQueues, DHCHAPSecretFile: n.DHCHAPSecretFile,
	})
	if err != nil {
		return agent.Found{}, err
	}
	return a.found(ns, ns.NewController), nil
}

func (a attacher) Verify(ctx context.Context, at store.Attachment) (string, bool, error) {
	t, nsid, err := nvmedrv.ParseIdentity(at.Identity)
	if err != nil {
		return "", false, err
	}
	ns, ok, err := a.c.Find(ctx, t, nsid)
	return ns.Device, ok, err
}

func (a attacher) Detach(ctx context.Context, at store.Attachment) error {
	t, _, err := nvmedrv.ParseIdentity(at.Identity)
	if err != nil {
		return err
	}
	// The core decides (decide.MayRelease) and calls Detach only to tear down;
	// this refuses once more what the firmware booted from, which a record
	// written before pinning existed would not mark.
	if firmware.PinnedNVMe(a.boot, t.NQN) {
		return nil
	}
	return kind.MarkBusy(a.c.Disconnect(ctx, t), nvmedrv.ErrBusy)
}

// Refresh has the controller rescan, so a namespace the target grew
// shows its new size (the kernel also does on the target's notice).
func (a attacher) Refresh(ctx context.Context, at store.Attachment) error {
	t, nsid, err := nvmedrv.ParseIdentity(at.Identity)
	if err != nil {
		return err
	}
	ns, ok, err := a.c.Find(ctx, t, nsid)
	if err != nil || !ok {
		return err
	}
	return a.c.Rescan(ns.Controller)
}

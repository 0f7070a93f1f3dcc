package iscsi

import (
	"context"
	"fmt"
	"slices"

	"github.com/volumed/volumed/agent"
	iscsidrv "github.com/volumed/volumed/drivers/iscsi"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// attacher adapts drivers/iscsidrv.
type attacher struct {
	c *iscsidrv.Client
	// sessions reads the kernel's iSCSI sessions (nil: c's sysfs read);
	// a test stands in for the kernel's iscsi_session class here.
	sessions sessionsReader
	host     firmware.HostIdentity
	boot     []firmware.BootVolume
}

func target(s *Source) iscsidrv.Target {
	return iscsidrv.Target{Portal: s.Portal, IQN: s.IQN}
}

func (a attacher) found(t iscsidrv.Target, disk iscsidrv.Disk, owned bool) agent.Found {
	return agent.Found{
		Device: disk.Device, Identity: disk.Identity(), Session: t.Key(),
		Owned: owned, Reusable: true, Pinned: firmware.PinnedISCSI(a.boot, t.IQN),
	}
}

func (a attacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil {
		return nil, err
	}
	t := target(s)
	disk, ok, err := a.c.Find(t, s.LUN)
	if err != nil || !ok {
		return nil, err
	}
	return []agent.Found{a.found(t, disk, false)}, nil
}

// sessionsReader reads the iSCSI sessions the kernel has.
type sessionsReader interface {
	Sessions() ([]iscsidrv.Session, error)
}

// hasSession says whether a session to t exists before the login. A
// sessions read that fails is an error, never "none": a session that
// was there (another tool's, the firmware's) would be recorded as
// volumed's and logged out by a later teardown.
func (a attacher) hasSession(t iscsidrv.Target) (bool, error) {
	var r sessionsReader = a.c
	if a.sessions != nil {
		r = a.sessions
	}
	ss, err := r.Sessions()
	if err != nil {
		return false, fmt.Errorf("read the iSCSI sessions before logging in to %s: %w", t.IQN, err)
	}
	return slices.ContainsFunc(ss, func(s iscsidrv.Session) bool { return s.Target.Key() == t.Key() }), nil
}

func (a attacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil {
		return agent.Found{}, err
	}
	t := target(s)
	o := iscsidrv.Options{Target: t, LUN: s.LUN, ReplacementTimeout: s.ReplacementTimeoutD}
	if c := s.CHAP; c != nil {
		o.CHAP = &iscsidrv.CHAP{Username: c.Username, PasswordFile: c.PasswordFile, MutualUsername: c.MutualUsername, MutualPasswordFile: c.MutualPasswordFile}
	}
	// iscsid uses the host's initiator name file; only a name that came
	// from elsewhere (firmware, DMI) is passed explicitly.
	if a.host.InitiatorNameFrom != firmware.FromInitiatorFile {
		o.InitiatorName = a.host.InitiatorName
	}
	existed, err := a.hasSession(t)
	if err != nil {
		return agent.Found{}, err
	}
	disk, err := a.c.Login(ctx, o)
	if err != nil {
		return agent.Found{}, err
	}
	return a.found(t, disk, !existed), nil
}

func (a attacher) Verify(_ context.Context, at store.Attachment) (string, bool, error) {
	t, lun, err := iscsidrv.ParseIdentity(at.Identity)
	if err != nil {
		return "", false, err
	}
	disk, ok, err := a.c.Find(t, lun)
	return disk.Device, ok, err
}

func (a attacher) Detach(ctx context.Context, at store.Attachment) error {
	t, _, err := iscsidrv.ParseIdentity(at.Identity)
	if err != nil {
		return err
	}
	// The core decides (decide.MayRelease) and calls Detach only to tear down;
	// this refuses once more what the firmware booted from, which a record
	// written before pinning existed would not mark.
	if firmware.PinnedISCSI(a.boot, t.IQN) {
		return nil
	}
	return kind.MarkBusy(a.c.Logout(ctx, t), iscsidrv.ErrBusy)
}

// Refresh rescans the session: a LUN grown on the target keeps its old
// size on the initiator until the SCSI disk is read again.
func (a attacher) Refresh(ctx context.Context, at store.Attachment) error {
	t, _, err := iscsidrv.ParseIdentity(at.Identity)
	if err != nil {
		return err
	}
	return a.c.Rescan(ctx, t)
}

package iscsi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/internal/inuse"
)

const (
	// pollInterval paces the sysfs polls for a LUN or a session to go.
	pollInterval = 100 * time.Millisecond
	// rescanAfterPolls: after a fresh login the kernel scans the target
	// itself (iscsid asks it to, asynchronously); a LUN still missing
	// after this many polls (2 s) gets one explicit rescan.
	rescanAfterPolls = 20
)

// Login attaches the LUN and returns its block device. If a session to the
// target exists, it is reused and only scanned for the LUN; otherwise the
// node record is created or updated (CHAP, replacement_timeout,
// node.startup=manual) and iscsiadm logs in. The wait for the block device
// is bounded by ctx and Client.Timeout. A session this call created is
// logged out again if its LUN never shows, so a failed Login leaves
// nothing behind.
func (c *Client) Login(ctx context.Context, o Options) (Disk, error) {
	d, err := c.login(ctx, o)
	if err != nil {
		return Disk{}, fmt.Errorf("iscsi login %s: %w", Identity(o.Target, o.LUN), err)
	}
	return d, nil
}

func (c *Client) login(ctx context.Context, o Options) (Disk, error) {
	if err := o.validate(); err != nil {
		return Disk{}, err
	}
	cr, err := loadCredentials(o.CHAP)
	if err != nil {
		return Disk{}, err
	}
	defer c.lock(o.Target)()

	if s, ok, err := c.firstSession(o.Target); err != nil || ok {
		if err != nil {
			return Disk{}, err
		}
		return c.waitLUN(ctx, s, o.LUN, true, cr.secrets())
	}

	iface, err := c.ensureIface(ctx, o.InitiatorName)
	if err != nil {
		return Disk{}, err
	}
	if err := c.ensureNode(ctx, o, iface, cr); err != nil {
		return Disk{}, err
	}
	_, err = c.iscsiadm(ctx, cr.secrets(), append(nodeArgs(o.Target, iface), "--login")...)
	created := err == nil
	if err != nil && !errors.Is(err, ErrSessionExists) {
		// Someone else logging in at the same moment is fine; anything
		// else failed.
		return Disk{}, err
	}
	s, ok, err := c.firstSession(o.Target)
	if err != nil {
		return Disk{}, err
	}
	if !ok {
		return Disk{}, errors.New("iscsiadm reported a login but sysfs shows no session to the target")
	}
	d, err := c.waitLUN(ctx, s, o.LUN, false, cr.secrets())
	if err != nil && created {
		// No volume uses a session we just made; do not leave it behind.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout())
		defer cancel()
		if lerr := c.logoutSessions(rctx, []Session{s}); lerr != nil {
			err = errors.Join(err, fmt.Errorf("logging out the new session again: %w", lerr))
		}
	}
	return d, err
}

// firstSession returns the target's session with the lowest ID.
func (c *Client) firstSession(t Target) (Session, bool, error) {
	ss, err := c.sessionsFor(t)
	if err != nil || len(ss) == 0 {
		return Session{}, false, err
	}
	return ss[0], true, nil
}

// waitLUN polls sysfs for the LUN's block device, bounded by ctx and the
// client timeout. A reused session is rescanned at once (the LUN may have
// been mapped since it logged in); a fresh one after the kernel's own scan
// had its chance.
func (c *Client) waitLUN(ctx context.Context, s Session, lun int, reused bool, secrets []string) (Disk, error) {
	wctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	rescanned := false
	var rescanErr error
	for polls := 0; ; polls++ {
		d, ok, why, err := c.findIn(s, lun)
		if err != nil {
			return Disk{}, err
		}
		if ok {
			return d, nil
		}
		if !rescanned && (reused || polls >= rescanAfterPolls) {
			rescanned = true
			_, rescanErr = c.iscsiadm(wctx, secrets, "-m", "session", "-r", strconv.Itoa(s.ID), "--rescan")
		}
		select {
		case <-wctx.Done():
			err := fmt.Errorf("%w: LUN %d did not show up on session %d (%s)", ErrLUNNotFound, lun, s.ID, why)
			if rescanErr != nil {
				err = fmt.Errorf("%w; rescan: %w", err, rescanErr)
			}
			if ctx.Err() != nil {
				return Disk{}, fmt.Errorf("%w: %w", err, ctx.Err())
			}
			return Disk{}, fmt.Errorf("%w within %s", err, c.timeout())
		case <-tick.C:
		}
		if _, err := os.Stat(filepath.Join(c.sysRoot(), classSession, "session"+strconv.Itoa(s.ID))); err != nil {
			return Disk{}, fmt.Errorf("session %d went away while waiting for LUN %d", s.ID, lun)
		}
	}
}

// Logout logs out every session to the target and deletes its node
// records. The caller decides that no volume uses the target any more;
// Logout still refuses (ErrBusy), before touching anything, while one of
// the target's disks or their partitions is mounted or held by another
// block device (device-mapper, md), because logging out would pull the
// disk from under it.
//
// The node record is deleted rather than kept: it holds the CHAP secrets,
// and a record left behind is what `iscsiadm -m node --loginall`, or an
// administrator, would log in to behind the agent's back. Login writes it
// again every time, so nothing is lost.
func (c *Client) Logout(ctx context.Context, t Target) error {
	if err := c.logout(ctx, t); err != nil {
		return fmt.Errorf("iscsi logout %s: %w", t, err)
	}
	return nil
}

func (c *Client) logout(ctx context.Context, t Target) error {
	if err := t.Validate(); err != nil {
		return err
	}
	defer c.lock(t)()
	sessions, err := c.sessionsFor(t)
	if err != nil {
		return err
	}
	for _, s := range sessions {
		if err := c.checkUnused(s); err != nil {
			return err
		}
	}
	if err := c.logoutSessions(ctx, sessions); err != nil {
		return err
	}
	return c.deleteNode(ctx, t)
}

// logoutSessions logs out the sessions by ID and confirms in sysfs that
// they are gone.
func (c *Client) logoutSessions(ctx context.Context, sessions []Session) error {
	for _, s := range sessions {
		_, err := c.iscsiadm(ctx, nil, "-m", "session", "-r", strconv.Itoa(s.ID), "--logout")
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	if len(sessions) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		var left []string
		for _, s := range sessions {
			if _, err := os.Lstat(filepath.Join(c.sysRoot(), classSession, "session"+strconv.Itoa(s.ID))); err == nil {
				left = append(left, strconv.Itoa(s.ID))
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("session %s still in sysfs after logout: %w", strings.Join(left, ", "), wctx.Err())
		case <-tick.C:
		}
	}
}

// checkUnused returns ErrBusy when a disk of the session is in use
// outside volumed by the one in-use rule (internal/inuse): holders of
// it or a partition, an exclusive open refused (a mount in any mount
// namespace), the mount table read only then.
func (c *Client) checkUnused(s Session) error {
	disks, err := c.disks(s)
	if err != nil {
		return err
	}
	for _, d := range disks {
		u, err := inuse.CheckAt(d.block, d.Device)
		if err != nil {
			return err
		}
		if busy, why := inuse.Busy(u); busy {
			return fmt.Errorf("%w: LUN %d: %s", ErrBusy, d.LUN, why)
		}
	}
	return nil
}

// Rescan rescans every session to the target, so the kernel picks up a
// grown LUN's new size and newly mapped LUNs.
func (c *Client) Rescan(ctx context.Context, t Target) error {
	if err := t.Validate(); err != nil {
		return err
	}
	sessions, err := c.sessionsFor(t)
	if err != nil {
		return fmt.Errorf("iscsi rescan %s: %w", t, err)
	}
	if len(sessions) == 0 {
		return fmt.Errorf("iscsi rescan %s: %w", t, ErrNoSession)
	}
	for _, s := range sessions {
		if _, err := c.iscsiadm(ctx, nil, "-m", "session", "-r", strconv.Itoa(s.ID), "--rescan"); err != nil {
			return fmt.Errorf("iscsi rescan %s: %w", t, err)
		}
	}
	return nil
}

// Orphans returns the targets that have a session, that the agent
// recorded as its own, and that no manifest wants any more: the sessions
// to log out at start-up. Sessions the agent never recorded (an
// administrator's, the boot firmware's) are never orphans.
func Orphans(sessions []Session, ours, wanted []Target) []Target {
	contains := func(ts []Target, t Target) bool {
		return slices.ContainsFunc(ts, t.same)
	}
	var out []Target
	for _, s := range sessions {
		if contains(ours, s.Target) && !contains(wanted, s.Target) && !contains(out, s.Target) {
			out = append(out, s.Target)
		}
	}
	slices.SortFunc(out, func(a, b Target) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

package nvme

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/inuse"
	"github.com/volumed/volumed/internal/keyed"
	"github.com/volumed/volumed/internal/secret"
)

// DefaultTimeout bounds Connect's wait for the namespace's block device
// and Disconnect's wait for the controller to go: the kernel scans
// namespaces asynchronously after the connect returns.
const DefaultTimeout = 30 * time.Second

// Client attaches and detaches NVMe-oF namespaces. The zero Client works
// on the host's /sys and /dev; a Client must not be copied after use.
//
// Connect and Disconnect of one Client are serialized per target where
// they look at and change controllers, so two volumes on one target never
// race to connect it twice, nor one to delete it while the other reuses
// it. Different targets do not wait for each other here (the kernel
// serializes writes to /dev/nvme-fabrics itself), and waiting for a
// namespace is not serialized at all.
type Client struct {
	SysRoot string  // "" means /sys
	DevRoot string  // "" means /dev
	Fabrics Fabrics // nil means DevFabrics at DevRoot/nvme-fabrics
	// Timeout bounds the waits of Connect and Disconnect (under their
	// context); 0 means DefaultTimeout.
	Timeout time.Duration

	locks keyed.Mutex // per Target.Key; a host has few targets
}

// lock takes the lock of target t and returns its release.
func (c *Client) lock(t Target) (unlock func()) { return c.locks.Lock(t.Key()) }

func (c *Client) fabrics() Fabrics {
	if c.Fabrics != nil {
		return c.Fabrics
	}
	return DevFabrics{Path: filepath.Join(c.devRoot(), "nvme-fabrics")}
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// normalized spells the target the way this package writes it to the
// kernel: port filled in, address canonical.
func (t Target) normalized() Target {
	t.Port = t.port()
	t.Address = t.addr()
	return t
}

// Find returns namespace nsid behind a usable controller to t, if sysfs
// shows one and its device node exists. It is how a record's Identity is
// found again after a restart or a reboot.
func (c *Client) Find(ctx context.Context, t Target, nsid int) (Namespace, bool, error) {
	if err := (Options{Target: t, Namespace: nsid}).Validate(); err != nil {
		return Namespace{}, false, fmt.Errorf("find nvme namespace: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Namespace{}, false, err
	}
	t = t.normalized()
	ns, ok, _, err := c.find(t, nsid)
	if err != nil {
		return Namespace{}, false, fmt.Errorf("find %s: %w", Identity(t, nsid), err)
	}
	return ns, ok, nil
}

// find also returns the usable controllers to t it looked at, live ones
// first.
func (c *Client) find(t Target, nsid int) (Namespace, bool, []Controller, error) {
	all, err := c.Controllers()
	if err != nil {
		return Namespace{}, false, nil, err
	}
	var ctrls []Controller
	for _, ctrl := range all {
		if ctrl.Usable() && ctrl.connectedTo(t) {
			ctrls = append(ctrls, ctrl)
		}
	}
	// A live path is preferred: without native multipath each controller
	// has its own node, and the one of a reconnecting controller stalls.
	slices.SortStableFunc(ctrls, func(a, b Controller) int {
		return boolInt(b.State == "live") - boolInt(a.State == "live")
	})
	for _, ctrl := range ctrls {
		ns, ok, err := c.namespace(ctrl, nsid)
		if err != nil || ok {
			ns.Target = t
			return ns, ok, ctrls, err
		}
	}
	return Namespace{}, false, ctrls, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Connect attaches namespace o.Namespace of o.Target and returns it once
// its block device exists. A usable controller to the same target is
// reused (whatever made it); otherwise one is connected through
// /dev/nvme-fabrics with o's settings. Connect never deletes a
// controller: if the namespace does not appear (a wrong nsid, an access
// list without this host) the controller stays for the caller to
// Disconnect once no volume uses the target.
func (c *Client) Connect(ctx context.Context, o Options) (Namespace, error) {
	if err := o.Validate(); err != nil {
		return Namespace{}, fmt.Errorf("connect nvme: %w", err)
	}
	o = o.withDefaults()
	o.Target = o.Target.normalized()
	id := Identity(o.Target, o.Namespace)
	var key secret.Value
	if o.DHCHAPSecretFile != "" {
		var err error
		if key, err = secret.Read(o.DHCHAPSecretFile); err != nil {
			return Namespace{}, fmt.Errorf("connect %s: dhchapSecretFile: %w", id, err)
		}
	}
	created, err := c.ensureController(ctx, o, key)
	if err != nil {
		return Namespace{}, fmt.Errorf("connect %s: %w", id, err)
	}
	ns, err := c.waitNamespace(ctx, o.Target, o.Namespace)
	if err != nil {
		return Namespace{}, fmt.Errorf("connect %s: %w", id, err)
	}
	ns.NewController = created
	return ns, nil
}

// ensureController makes sure a usable controller to o.Target exists and
// reports whether it made it.
func (c *Client) ensureController(ctx context.Context, o Options, key secret.Value) (bool, error) {
	defer c.lock(o.Target)()
	if ok, err := c.reusable(o); err != nil || ok {
		return false, err
	}
	opts, err := o.optionString(key)
	if err != nil {
		return false, err
	}
	reply, err := c.fabrics().Connect(ctx, opts)
	if errors.Is(err, unix.EALREADY) {
		// Another program connected it between our look and our write.
		if ok, rerr := c.reusable(o); rerr != nil || ok {
			return false, rerr
		}
		return false, fmt.Errorf("%w, yet sysfs shows no usable controller to the target", err)
	}
	if err != nil {
		return false, err
	}
	inst, _, err := ParseReply(reply)
	if err != nil {
		return true, fmt.Errorf("connected, but: %w", err)
	}
	name := "nvme" + strconv.Itoa(inst)
	ctrl, err := c.readController(name)
	if err != nil {
		return true, fmt.Errorf("connected as %s, but: %w", name, err)
	}
	if !ctrl.connectedTo(o.Target) {
		return true, fmt.Errorf("the kernel reported %s, which is connected to %s at %q", name, ctrl.SubsysNQN, ctrl.RawAddress)
	}
	return true, nil
}

// reusable reports whether a usable controller to o.Target exists that
// was connected with the host NQN o asks for.
func (c *Client) reusable(o Options) (bool, error) {
	all, err := c.Controllers()
	if err != nil {
		return false, err
	}
	var other *Controller
	for i, ctrl := range all {
		if !ctrl.Usable() || !ctrl.connectedTo(o.Target) {
			continue
		}
		if o.HostNQN == "" || ctrl.HostNQN == "" || ctrl.HostNQN == o.HostNQN {
			return true, nil
		}
		other = &all[i]
	}
	if other != nil {
		return false, fmt.Errorf("%w: %s is connected as %s, not %s", ErrHostMismatch, other.Name, other.HostNQN, o.HostNQN)
	}
	return false, nil
}

// waitNamespace polls sysfs until the namespace and its node appear, at
// most c.timeout() and no longer than ctx.
func (c *Client) waitNamespace(ctx context.Context, t Target, nsid int) (Namespace, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	backoff := 5 * time.Millisecond
	for {
		ns, ok, ctrls, err := c.find(t, nsid)
		if err != nil || ok {
			return ns, err
		}
		if err := sleep(ctx, backoff); err != nil {
			if len(ctrls) == 0 {
				return Namespace{}, fmt.Errorf("no usable controller to the target: %w", err)
			}
			return Namespace{}, fmt.Errorf("namespace %d did not appear on %s (the controller stays connected): %w", nsid, describe(ctrls), err)
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

func describe(ctrls []Controller) string {
	s := make([]string, len(ctrls))
	for i, c := range ctrls {
		s[i] = c.Name + " (" + c.State + ")"
	}
	return strings.Join(s, ", ")
}

// Disconnect deletes every controller to t, by writing to its
// delete_controller attribute, and waits until sysfs shows none. This
// takes away every namespace of the subsystem reached at that address,
// so the caller disconnects only when no volume uses t. As a last guard
// it refuses with ErrBusy while a namespace that would lose its last
// path is mounted, held or opened exclusively. No controller is no error.
func (c *Client) Disconnect(ctx context.Context, t Target) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("disconnect nvme: %w", err)
	}
	t = t.normalized()
	defer c.lock(t)()
	if err := c.disconnect(ctx, t); err != nil {
		return fmt.Errorf("disconnect %s: %w", t.Key(), err)
	}
	return nil
}

func (c *Client) disconnect(ctx context.Context, t Target) error {
	all, err := c.Controllers()
	if err != nil {
		return err
	}
	mine := connectedTo(all, t)
	if len(mine) == 0 {
		return nil
	}
	if err := c.checkUnused(all, mine); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	written := map[string]bool{}
	backoff := 5 * time.Millisecond
	for {
		for _, ctrl := range mine {
			if written[ctrl.Name] || ctrl.deleting() {
				continue
			}
			// The kernel deletes synchronously in the write; EBUSY means
			// the controller has not finished its first connect yet.
			err := writeAttr(filepath.Join(c.ctrlDir(ctrl.Name), "delete_controller"), "1")
			switch {
			case err == nil, errors.Is(err, fs.ErrNotExist):
				written[ctrl.Name] = true
			case errors.Is(err, unix.EBUSY):
			default:
				return fmt.Errorf("delete %s: %w", ctrl.Name, err)
			}
		}
		if all, err = c.Controllers(); err != nil {
			return err
		}
		if mine = connectedTo(all, t); len(mine) == 0 {
			return nil
		}
		if err := sleep(ctx, backoff); err != nil {
			return fmt.Errorf("%s still present: %w", describe(mine), err)
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

func connectedTo(all []Controller, t Target) []Controller {
	var out []Controller
	for _, ctrl := range all {
		if ctrl.connectedTo(t) {
			out = append(out, ctrl)
		}
	}
	return out
}

// checkUnused refuses deleting controllers while a namespace that
// would go with them is in use. A multipath head stays while another
// controller of its subsystem (another address) is usable, so only heads
// whose every path is among the deleted are checked.
func (c *Client) checkUnused(all, deleted []Controller) error {
	gone := map[string]bool{}
	for _, ctrl := range deleted {
		gone[ctrl.Name] = true
	}
	for _, ctrl := range deleted {
		keepsPath := false
		for _, o := range all {
			if o.Subsystem != "" && o.Subsystem == ctrl.Subsystem && !gone[o.Name] && o.Usable() {
				keepsPath = true
			}
		}
		if keepsPath {
			ctrl.Subsystem = "" // its heads stay: check only its own nodes
		}
		dirs, err := c.namespaceDirs(ctrl)
		if err != nil {
			return err
		}
		for _, d := range dirs {
			if err := c.checkNamespaceUnused(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNamespaceUnused refuses a namespace that is in use outside
// volumed, by the one in-use rule (internal/inuse).
func (c *Client) checkNamespaceUnused(d nsDir) error {
	u, err := inuse.CheckAt(d.path, filepath.Join(c.devRoot(), d.name))
	if err != nil {
		return err
	}
	if busy, why := inuse.Busy(u); busy {
		return fmt.Errorf("%w: %s", ErrBusy, why)
	}
	return nil
}

// Rescan asks controller name (nvmeN) to rescan its namespaces, so that
// a namespace the target grew shows its new size.
func (c *Client) Rescan(name string) error {
	if _, ok := instanceOf(name); !ok {
		return fmt.Errorf("rescan: %q is not a controller name (nvmeN)", name)
	}
	if err := writeAttr(filepath.Join(c.ctrlDir(name), "rescan_controller"), "1"); err != nil {
		return fmt.Errorf("rescan %s: %w", name, err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error { return keyed.Sleep(ctx, d) }

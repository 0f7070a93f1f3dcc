package nvme

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/volumed/volumed/internal/sysfs"
)

// Controller is an NVMe controller as /sys/class/nvme/nvmeN shows it.
type Controller struct {
	Name       string // nvme0
	Instance   int    // the N of nvmeN
	Transport  string // tcp, rdma, fc, loop, pcie
	Address    Address
	RawAddress string // the address attribute as read (a PCI address for pcie)
	SubsysNQN  string
	State      string // live, connecting, resetting, new, deleting, deleting (no IO), dead
	HostNQN    string
	HostID     string
	CntlID     int
	Subsystem  string // nvme-subsysN the controller belongs to, "" if not found
}

// Usable reports whether the controller serves I/O now or will again by
// itself: live, or reconnecting after a transport failure. A controller
// in any other state is being set up or torn down.
func (c Controller) Usable() bool {
	switch c.State {
	case "live", "connecting", "resetting", "new":
		return true
	}
	return false
}

func (c Controller) deleting() bool {
	return strings.HasPrefix(c.State, "deleting") || c.State == "dead"
}

// Target returns what a tcp or rdma controller is connected to; ok is
// false for other transports and unreadable addresses.
func (c Controller) Target() (t Target, ok bool) {
	if c.Transport != "tcp" && c.Transport != "rdma" || c.Address.TrAddr == "" {
		return Target{}, false
	}
	port, err := parseUint(c.Address.TrSvcID, 65535)
	if err != nil {
		return Target{}, false
	}
	return Target{Transport: c.Transport, Address: c.Address.TrAddr, Port: port, NQN: c.SubsysNQN}, true
}

// connectedTo reports whether the controller connects to t (whatever
// its state). Addresses compare as IP addresses, so another tool's
// spelling of the same address still matches.
func (c Controller) connectedTo(t Target) bool {
	ct, ok := c.Target()
	if !ok || ct.Transport != t.Transport || ct.NQN != t.NQN || ct.port() != t.port() {
		return false
	}
	a, errA := netip.ParseAddr(ct.Address)
	b, errB := netip.ParseAddr(t.Address)
	if errA != nil || errB != nil {
		return ct.Address == t.Address
	}
	return a == b
}

func (c *Client) sysRoot() string { return sysfs.RootOr(c.SysRoot) }

func (c *Client) devRoot() string {
	if c.DevRoot == "" {
		return "/dev"
	}
	return c.DevRoot
}

func (c *Client) ctrlDir(name string) string {
	return filepath.Join(c.sysRoot(), "class", "nvme", name)
}

func (c *Client) subsysDir(name string) string {
	return filepath.Join(c.sysRoot(), "class", "nvme-subsystem", name)
}

// Controllers lists the NVMe controllers sysfs shows, ordered by
// instance. A controller removed while it is being read is left out. A
// host without the nvme modules has none.
func (c *Client) Controllers() ([]Controller, error) {
	dir := filepath.Join(c.sysRoot(), "class", "nvme")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list nvme controllers: %w", err)
	}
	subsys, err := c.subsystemsByController()
	if err != nil {
		return nil, err
	}
	var out []Controller
	for _, e := range entries {
		inst, ok := instanceOf(e.Name())
		if !ok {
			continue
		}
		ctrl, err := c.readController(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ctrl.Instance = inst
		ctrl.Subsystem = subsys[ctrl.Name]
		out = append(out, ctrl)
	}
	slices.SortFunc(out, func(a, b Controller) int { return a.Instance - b.Instance })
	return out, nil
}

func (c *Client) readController(name string) (Controller, error) {
	dir := c.ctrlDir(name)
	ctrl := Controller{Name: name}
	var err error
	// Attributes every controller has: missing means it is going away.
	for _, a := range []struct {
		attr string
		dst  *string
	}{{"transport", &ctrl.Transport}, {"state", &ctrl.State}, {"subsysnqn", &ctrl.SubsysNQN}} {
		if *a.dst, err = sysfs.Attr(filepath.Join(dir, a.attr)); err != nil {
			return ctrl, err
		}
	}
	for _, a := range []struct {
		attr string
		dst  *string
	}{{"address", &ctrl.RawAddress}, {"hostnqn", &ctrl.HostNQN}, {"hostid", &ctrl.HostID}} {
		if *a.dst, err = sysfs.Attr(filepath.Join(dir, a.attr)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return ctrl, err
		}
	}
	if cntlid, err := sysfs.Attr(filepath.Join(dir, "cntlid")); err == nil {
		ctrl.CntlID, _ = parseUint(cntlid, 0xffff)
	}
	if ctrl.Transport != "pcie" {
		// An address this package cannot read leaves Address empty: the
		// controller then matches no target, which is safe.
		ctrl.Address, _ = ParseAddress(ctrl.RawAddress)
	}
	return ctrl, nil
}

// subsystemsByController maps controller names to their subsystem
// (/sys/class/nvme-subsystem/nvme-subsysN holds a link per controller).
func (c *Client) subsystemsByController() (map[string]string, error) {
	dir := filepath.Join(c.sysRoot(), "class", "nvme-subsystem")
	subs, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list nvme subsystems: %w", err)
	}
	m := map[string]string{}
	for _, s := range subs {
		if !strings.HasPrefix(s.Name(), "nvme-subsys") {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(dir, s.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list nvme subsystem %s: %w", s.Name(), err)
		}
		for _, e := range entries {
			if _, ok := instanceOf(e.Name()); ok {
				m[e.Name()] = s.Name()
			}
		}
	}
	return m, nil
}

// nsDir is a namespace block device's directory in sysfs.
type nsDir struct {
	name string // nvme0n1
	path string
}

// namespaceDirs lists the namespace block devices of a controller: its
// own (nvme<instance>nY, without native multipath) and, with native
// multipath, the shared heads of its subsystem (nvmeSnY). The hidden
// per-path devices (nvmeScCnY) have no /dev node and are skipped.
func (c *Client) namespaceDirs(ctrl Controller) ([]nsDir, error) {
	var out []nsDir
	list := func(dir string, want func(ctrlInst int) bool) error {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list namespaces: %w", err)
		}
		for _, e := range entries {
			if inst, ok := namespaceName(e.Name()); ok && want(inst) {
				out = append(out, nsDir{e.Name(), filepath.Join(dir, e.Name())})
			}
		}
		return nil
	}
	if err := list(c.ctrlDir(ctrl.Name), func(i int) bool { return i == ctrl.Instance }); err != nil {
		return nil, err
	}
	if ctrl.Subsystem != "" {
		if err := list(c.subsysDir(ctrl.Subsystem), func(int) bool { return true }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// namespace returns the namespace nsid of ctrl when sysfs shows it and
// its device node exists.
func (c *Client) namespace(ctrl Controller, nsid int) (Namespace, bool, error) {
	dirs, err := c.namespaceDirs(ctrl)
	if err != nil {
		return Namespace{}, false, err
	}
	for _, d := range dirs {
		v, err := sysfs.Attr(filepath.Join(d.path, "nsid"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Namespace{}, false, err
		}
		if n, err := parseUint(v, maxNSID); err != nil || n != nsid {
			continue
		}
		size, err := sysfs.Size(d.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Namespace{}, false, err
		}
		dev := filepath.Join(c.devRoot(), d.name)
		if _, err := os.Stat(dev); errors.Is(err, fs.ErrNotExist) {
			return Namespace{}, false, nil // udev or devtmpfs has not made it yet
		} else if err != nil {
			return Namespace{}, false, err
		}
		return Namespace{Device: dev, Controller: ctrl.Name, NSID: nsid, SizeBytes: size}, true, nil
	}
	return Namespace{}, false, nil
}

// instanceOf parses a controller name "nvmeN".
func instanceOf(name string) (int, bool) {
	n, err := parseUint(strings.TrimPrefix(name, "nvme"), 1<<31-1)
	return n, err == nil && strings.HasPrefix(name, "nvme")
}

// namespaceName parses a namespace block device name "nvmeXnY" and
// returns X: the controller instance without multipath, the subsystem
// instance with it.
func namespaceName(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "nvme")
	if !ok {
		return 0, false
	}
	x, y, ok := strings.Cut(rest, "n")
	if !ok {
		return 0, false
	}
	xi, err := parseUint(x, 1<<31-1)
	if err != nil {
		return 0, false
	}
	if _, err := parseUint(y, 1<<31-1); err != nil {
		return 0, false
	}
	return xi, true
}

// writeAttr writes a value to a sysfs attribute in one write.
func writeAttr(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Package nvme attaches NVMe over Fabrics namespaces (TCP, and RDMA by
// the same path) without nvme-cli: one write of an option string to
// /dev/nvme-fabrics, one read of "instance=N,cntlid=M" on the same file
// descriptor, then the namespace's block device is found in sysfs by its
// nsid, under /sys/class/nvme/nvmeN or, with native multipath, under
// /sys/class/nvme-subsystem. A controller is removed by writing to its
// delete_controller attribute.
//
// A namespace is identified by subsystem NQN + transport address + nsid
// (Identity), never by a remembered /dev/nvmeXnY: the kernel numbers
// controllers and namespaces in the order they appear, and with native
// multipath the node name does not even carry the nsid.
//
// One controller serves every namespace of a subsystem at one address,
// so Connect reuses a live controller instead of connecting twice, and
// Disconnect removes the controller for all of them: the caller calls it
// only when no volume uses the target any more.
package nvme

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

const (
	// DefaultPort is the IANA port of NVMe over Fabrics I/O controllers.
	DefaultPort = 4420

	// DefaultCtrlLossTmo is how long the kernel keeps reconnecting a
	// controller whose transport failed before it gives up and removes
	// it. The kernel's own default (600 s) turns a ten-minute outage
	// (a switch firmware update, a WAN flap at an edge site) into a
	// removed disk and a filesystem with I/O errors. Forever is no
	// better on an unattended host: every process touching the mount,
	// and the unmount at shutdown, then hangs without bound when the
	// target is really gone. Half an hour rides out maintenance windows
	// and still ends in an error someone can see.
	DefaultCtrlLossTmo = 30 * time.Minute

	// DefaultReconnectDelay is the pause between reconnect attempts:
	// the kernel's default, written explicitly so the option string
	// does not depend on the kernel version.
	DefaultReconnectDelay = 10 * time.Second

	// Forever, as Options.CtrlLossTmo, keeps reconnecting without end
	// (ctrl_loss_tmo=-1). Any negative CtrlLossTmo means the same.
	Forever time.Duration = -1

	// DiscoveryNQN is the well-known NQN of discovery controllers, which
	// have no namespaces to attach.
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

	// maxNQN is NVMF_NQN_SIZE: the kernel refuses longer NQNs.
	maxNQN = 223
)

var (
	// ErrBusy: a namespace of the controller is mounted, held by another
	// block device or opened exclusively; the controller was left alone.
	ErrBusy = errors.New("namespace is in use")
	// ErrHostMismatch: a live controller to the target was connected
	// with a different host NQN than the one asked for.
	ErrHostMismatch = errors.New("controller connected with a different host NQN")
)

// Target is what one controller connects to: a subsystem at a transport
// address. Every namespace of the subsystem is reached through it.
type Target struct {
	Transport string // "tcp" or "rdma"
	Address   string // IPv4 or IPv6 address (traddr), a zone allowed
	Port      int    // trsvcid; 0 means DefaultPort
	NQN       string // subsystem NQN
}

// Options describe one namespace to attach and how its controller is
// connected when there is none yet. The controller settings only apply
// to a new controller: a reused one keeps the settings it was made with.
type Options struct {
	Target
	Namespace int // nsid, 1 or more

	// HostNQN and HostID identify this host to the target; "" lets the
	// kernel use its default (a random NQN per boot unless
	// /etc/nvme/hostnqn was configured for it, so callers should pass
	// the host's stable identity).
	HostNQN, HostID string

	// CtrlLossTmo: 0 means DefaultCtrlLossTmo, negative means Forever.
	CtrlLossTmo time.Duration
	// ReconnectDelay: 0 means DefaultReconnectDelay.
	ReconnectDelay time.Duration
	// KeepAliveTmo: 0 leaves the kernel's default (5 s for I/O
	// controllers), which matches its keep-alive traffic to the
	// transport.
	KeepAliveTmo time.Duration
	// NrIOQueues: 0 leaves the kernel's default (one per CPU).
	NrIOQueues int

	// DHCHAPSecretFile names a root-owned file of mode 0600 holding the
	// DH-HMAC-CHAP host key ("DHHC-1:NN:base64:"); "" means no
	// authentication. The key is read with internal/secret and never
	// appears in an error.
	DHCHAPSecretFile string
}

// Namespace is an attached namespace as sysfs shows it now. Device is
// only valid until the controller goes away; Identity is what to keep.
type Namespace struct {
	Device     string // block device node, e.g. /dev/nvme0n1
	Controller string // a controller the namespace is reached through, e.g. nvme0
	NSID       int
	SizeBytes  int64
	Target     Target
	// NewController is set by Connect when it created the controller
	// (false: an existing one was reused, perhaps made by someone else).
	NewController bool
}

// Identity is the stable identity of the namespace.
func (n Namespace) Identity() string { return Identity(n.Target, n.NSID) }

func (t Target) port() int {
	if t.Port == 0 {
		return DefaultPort
	}
	return t.Port
}

// addr returns the target's address in canonical form, or the address
// as given when it does not parse (Validate reports that).
func (t Target) addr() string {
	if a, err := netip.ParseAddr(t.Address); err == nil {
		return a.String()
	}
	return t.Address
}

// Key names the controller's target canonically: the same target spelt
// two ways ("2001:DB8::1" and "2001:db8::1", port 0 and 4420) has one key.
func (t Target) Key() string {
	host := t.addr()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return t.Transport + ":" + host + ":" + strconv.Itoa(t.port()) + ":" + t.NQN
}

func (t Target) String() string { return t.Key() }

// Identity renders the stable identity of namespace nsid behind t, e.g.
// "nvme:tcp:192.0.2.1:4420:nqn.2026-01.com.example:data:ns1". It is what
// a record keeps across reboots; ParseIdentity reads it back.
func Identity(t Target, nsid int) string {
	return "nvme:" + t.Key() + ":ns" + strconv.Itoa(nsid)
}

// ParseIdentity reads an Identity back into the target and nsid, and
// checks them like Options.Validate.
func ParseIdentity(s string) (Target, int, error) {
	t, nsid, err := parseIdentity(s)
	if err == nil {
		err = (Options{Target: t, Namespace: nsid}).Validate()
	}
	if err != nil {
		return Target{}, 0, fmt.Errorf("nvme identity %q: %w", s, err)
	}
	return t, nsid, nil
}

func parseIdentity(s string) (Target, int, error) {
	var t Target
	rest, ok := strings.CutPrefix(s, "nvme:")
	if !ok {
		return t, 0, errors.New(`does not start with "nvme:"`)
	}
	if t.Transport, rest, ok = strings.Cut(rest, ":"); !ok {
		return t, 0, errors.New("no address")
	}
	if r, bracketed := strings.CutPrefix(rest, "["); bracketed {
		if t.Address, rest, ok = strings.Cut(r, "]"); !ok {
			return t, 0, errors.New("unterminated [address]")
		}
		if rest, ok = strings.CutPrefix(rest, ":"); !ok {
			return t, 0, errors.New("no port after [address]")
		}
	} else if t.Address, rest, ok = strings.Cut(rest, ":"); !ok {
		return t, 0, errors.New("no port")
	}
	port, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return t, 0, errors.New("no NQN")
	}
	p, err := parseUint(port, 65535)
	if err != nil {
		return t, 0, fmt.Errorf("port: %w", err)
	}
	t.Port = p
	i := strings.LastIndex(rest, ":ns")
	if i < 0 {
		return t, 0, errors.New(`no ":ns<nsid>" at the end`)
	}
	t.NQN = rest[:i]
	nsid, err := parseUint(rest[i+len(":ns"):], 1<<32-1)
	if err != nil {
		return t, 0, fmt.Errorf("nsid: %w", err)
	}
	return t, nsid, nil
}

// parseUint parses a plain decimal number (no sign, no spaces, no
// underscores) of at most max.
func parseUint(s string, max uint64) (int, error) {
	if s == "" || len(s) > 20 {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > max {
		return 0, fmt.Errorf("%q is out of range (at most %d)", s, max)
	}
	return int(v), nil
}

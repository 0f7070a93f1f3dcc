// Package iscsi attaches iSCSI LUNs through open-iscsi. iscsiadm (and the
// iscsid it talks to) does node records, login, logout and rescans; what
// the kernel has actually attached - sessions, their portals, the LUNs'
// block devices - is read from sysfs, never parsed out of iscsiadm's
// output, and the block device is found there directly instead of waiting
// for udev's /dev/disk/by-path symlinks.
//
// A session is identified by its Target (portal + IQN), a disk by Target +
// LUN (Identity), never by its /dev/sdX name, which the kernel hands out in
// discovery order and reuses.
//
// Every iscsiadm call runs with an argument vector and a timeout. CHAP
// secrets never appear in an argument vector (see writeCredentials for how
// they reach open-iscsi instead) and are redacted from every error.
package iscsi

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/internal/keyed"
	"github.com/volumed/volumed/internal/sysfs"
)

const (
	// DefaultPort is the iSCSI port a portal without one gets.
	DefaultPort = 3260
	// DefaultTimeout bounds each iscsiadm call and the wait for a LUN's
	// block device when Client.Timeout is zero.
	DefaultTimeout = 30 * time.Second
	// DefaultReplacementTimeout is the replacement_timeout a session gets
	// when Options leave it zero: how long the kernel queues I/O while it
	// re-establishes a dropped session before failing it upwards. The
	// agent runs one path per volume (no dm-multipath to fail over to), so
	// failed I/O lands on the filesystem, which then goes read-only (ext4)
	// or shuts down (xfs) and needs an unmount to recover; two minutes rides
	// out switch reboots, link renegotiation and HA-target failovers, which
	// typically take 30-90 s. It is open-iscsi's own default, but it is
	// always written into the node record explicitly so a host whose
	// iscsid.conf was tuned for multipath (often 5 s) does not silently
	// shorten it. "Never" (a negative value) is allowed but not the
	// default: processes would hang in D state for as long as the target is
	// gone and block shutdown.
	DefaultReplacementTimeout = 120 * time.Second
	// defaultIface is open-iscsi's built-in iface: software iSCSI over TCP
	// with the host's initiator name.
	defaultIface = "default"
	// maxNameLen is RFC 3720's limit on iSCSI names.
	maxNameLen = 223
)

// Target is one iSCSI target portal; it is the key of one session.
type Target struct {
	Portal string // "192.0.2.10:3260", "192.0.2.10" (port 3260) or "[2001:db8::1]:3260"
	IQN    string // iqn.*, eui.* or naa.* name
}

// Key is the target's canonical form, "IQN@ip:port", equal for every
// spelling of the same portal.
func (t Target) Key() string { return t.IQN + "@" + t.portal() }

func (t Target) String() string { return t.Key() }

// portal renders the portal canonically, or as given if it does not parse.
func (t Target) portal() string {
	if ap, err := parsePortal(t.Portal); err == nil {
		return ap.String()
	}
	return t.Portal
}

// Validate checks that the portal is an IP address with an optional port
// and that the IQN is a well-formed iSCSI name.
func (t Target) Validate() error {
	if _, err := parsePortal(t.Portal); err != nil {
		return err
	}
	return validName("target IQN", t.IQN)
}

// same reports whether t and o name the same target portal.
func (t Target) same(o Target) bool {
	if t.IQN != o.IQN {
		return false
	}
	a, errA := parsePortal(t.Portal)
	b, errB := parsePortal(o.Portal)
	return errA == nil && errB == nil && a == b
}

// parsePortal accepts "ip", "ip:port", "[ipv6]:port". Host names are
// refused: sysfs reports sessions by address, so a session to a name could
// never be matched, and a name that resolves elsewhere later would move the
// volume.
func parsePortal(s string) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, errors.New("portal is empty")
	}
	bare := s
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		bare = s[1 : len(s)-1]
	}
	if a, err := netip.ParseAddr(bare); err == nil {
		return netip.AddrPortFrom(a.Unmap(), DefaultPort), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("portal %q: want an IP address with an optional port (192.0.2.10:3260, [2001:db8::1]:3260); host names are not accepted", s)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("portal %q: port 0", s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// validName checks an iSCSI name (RFC 3720 3.2.6). The IQN also becomes a
// directory name in open-iscsi's node database, which this package writes
// to, so anything that could walk out of it is refused here.
func validName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("%s %q: longer than %d bytes", what, s, maxNameLen)
	}
	lower := strings.ToLower(s)
	if !strings.HasPrefix(lower, "iqn.") && !strings.HasPrefix(lower, "eui.") && !strings.HasPrefix(lower, "naa.") {
		return fmt.Errorf(`%s %q: must start with "iqn.", "eui." or "naa."`, what, s)
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '-' || r == ':' || r == '_'
		if !ok {
			return fmt.Errorf("%s %q: character %q not allowed (iSCSI names use letters, digits, '.', '-', ':')", what, s, r)
		}
	}
	return nil
}

// Identity is the stable identity of a LUN for records, e.g.
// "iscsi:iqn.2024-01.io.example:data@192.0.2.10:3260:lun0".
func Identity(t Target, lun int) string {
	return "iscsi:" + t.Key() + ":lun" + strconv.Itoa(lun)
}

// ParseIdentity reads an Identity back into the target and LUN, and
// checks the target like Target.Validate: a record that does not read
// back is refused, never half understood.
func ParseIdentity(id string) (Target, int, error) {
	bad := func(why string) (Target, int, error) {
		return Target{}, 0, fmt.Errorf("iscsi identity %q: %s", id, why)
	}
	rest, ok := strings.CutPrefix(id, "iscsi:")
	if !ok {
		return bad(`does not start with "iscsi:"`)
	}
	lunAt := strings.LastIndex(rest, ":lun")
	if lunAt < 0 {
		return bad("no LUN")
	}
	lun, err := strconv.Atoi(rest[lunAt+len(":lun"):])
	if err != nil || lun < 0 || strconv.Itoa(lun) != rest[lunAt+len(":lun"):] {
		return bad("LUN is not a number")
	}
	iqn, portal, ok := strings.Cut(rest[:lunAt], "@")
	if !ok {
		return bad("no portal")
	}
	t := Target{IQN: iqn, Portal: portal}
	if err := t.Validate(); err != nil {
		return bad(err.Error())
	}
	return t, lun, nil
}

// CHAP names the credentials of a login. Passwords are read from files
// with internal/secret (root-owned, mode 0600 or stricter) at every Login,
// so a rotated secret is picked up by the next login.
type CHAP struct {
	Username     string
	PasswordFile string
	// Mutual (bidirectional) CHAP: the target proves itself with these.
	// Both or neither.
	MutualUsername     string
	MutualPasswordFile string
}

// Options describe one LUN to attach.
type Options struct {
	Target
	LUN  int
	CHAP *CHAP // nil: no authentication
	// ReplacementTimeout is node.session.timeo.replacement_timeout, whole
	// seconds (rounded up). 0 means DefaultReplacementTimeout; negative
	// means I/O is queued until the session is back or logged out. It is
	// applied when the session is created; a session already shared with
	// other volumes keeps the value it was created with (see
	// Session.ReplacementTimeout).
	ReplacementTimeout time.Duration
	// InitiatorName is the initiator IQN this login uses; "" means the
	// host's (iscsid's /etc/iscsi/initiatorname.iscsi). A non-empty name
	// is carried by an iscsiadm iface of our own, named after it.
	InitiatorName string
}

func (o Options) validate() error {
	if err := o.Target.Validate(); err != nil {
		return err
	}
	if o.LUN < 0 {
		return fmt.Errorf("lun %d: must not be negative", o.LUN)
	}
	if o.InitiatorName != "" {
		if err := validName("initiator name", o.InitiatorName); err != nil {
			return err
		}
	}
	if o.ReplacementTimeout > time.Duration(1<<31-1)*time.Second {
		return fmt.Errorf("replacement timeout %s: too long", o.ReplacementTimeout)
	}
	return nil
}

// replacementSeconds renders the replacement timeout as the node record
// wants it.
func (o Options) replacementSeconds() string {
	d := o.ReplacementTimeout
	switch {
	case d == 0:
		d = DefaultReplacementTimeout
	case d < 0:
		return "-1"
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// Disk is a LUN's block device as sysfs reports it.
type Disk struct {
	Device    string // /dev/sdb
	SessionID int
	LUN       int
	SizeBytes int64
	Target    Target // from the session, canonical portal
	HCTL      string // SCSI address, "2:0:0:0"

	dev   uint64 // device number from sysfs
	block string // its sysfs directory, .../H:C:T:L/block/sdX
}

// Identity returns the disk's stable identity (see Identity).
func (d Disk) Identity() string { return Identity(d.Target, d.LUN) }

// Session is an iSCSI session as sysfs reports it.
type Session struct {
	ID            int
	Target        Target // portal from the connection's persistent address and port
	TPGT          int
	Iface         string // iscsiadm iface name ("default" for software iSCSI)
	InitiatorName string
	State         string // LOGGED_IN, FAILED (recovering) or FREE
	// ReplacementTimeout is the session's recovery_tmo; negative: never.
	ReplacementTimeout time.Duration
	Host               int // SCSI host number, the H of the LUNs' H:C:T:L; -1 if unknown
}

// Client attaches LUNs. The zero value works with the host's defaults. A
// Client serialises operations on the same target (one session each) and
// must not be copied after first use.
type Client struct {
	SysRoot string // "" = "/sys"
	DevRoot string // "" = "/dev"
	// NodeDB is open-iscsi's node database. "" = the first of
	// /etc/iscsi/nodes (Debian, SUSE, upstream) and /var/lib/iscsi/nodes
	// (Fedora, RHEL) that holds the target's record.
	NodeDB string
	Runner Runner // nil = ExecRunner{} (iscsiadm from $PATH)
	// Timeout bounds each iscsiadm call and the wait for a LUN; 0 =
	// DefaultTimeout. Keep it above 20 s: iscsid takes 15 s (the
	// login_timeout Login sets) to give up on a dead portal.
	Timeout time.Duration

	locks keyed.Mutex // per Target.Key; a host has few targets
}

func (c *Client) sysRoot() string { return sysfs.RootOr(c.SysRoot) }
func (c *Client) devRoot() string { return orDefault(c.DevRoot, "/dev") }

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

func (c *Client) runner() Runner {
	if c.Runner != nil {
		return c.Runner
	}
	return ExecRunner{}
}

// lock serialises work on one target: two volumes on the same target must
// not both decide that no session exists and log in twice, and a logout
// must not run under a login that is reusing the session.
func (c *Client) lock(t Target) (unlock func()) { return c.locks.Lock(t.Key()) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

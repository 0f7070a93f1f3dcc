package iscsi

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/sysfs"
)

// Sysfs layout (Linux 6.x, iscsi_tcp):
//
//	/sys/class/iscsi_session/session1 -> ../../devices/platform/host2/session1/iscsi_session/session1
//	    targetname tpgt ifacename initiatorname state recovery_tmo
//	    device -> ../../../session1
//	/sys/devices/platform/host2/session1/target2:0:0/2:0:0:0/block/sdb/{dev,size}
//	/sys/class/iscsi_connection/connection1:0 -> ../../devices/platform/host2/session1/connection1:0/iscsi_connection/connection1:0
//	    persistent_address persistent_port
//
// Offload drivers (qla4xxx, bnx2i) hang the host under a PCI device
// instead of platform; nothing here depends on that part of the path.
const (
	classSession    = "class/iscsi_session"
	classConnection = "class/iscsi_connection"
)

// Sessions lists the host's iSCSI sessions, ordered by ID. A session that
// disappears while it is being read (a logout racing us) is left out.
func (c *Client) Sessions() ([]Session, error) {
	dir := filepath.Join(c.sysRoot(), classSession)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // scsi_transport_iscsi not loaded: no sessions
	}
	if err != nil {
		return nil, err
	}
	conns, err := c.connections()
	if err != nil {
		return nil, err
	}
	var out []Session
	for _, e := range entries {
		id, ok := parseIndexed(e.Name(), "session")
		if !ok {
			continue
		}
		s, err := c.readSession(id, conns[id])
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Session) int { return a.ID - b.ID })
	return out, nil
}

// connections maps a session ID to its first connection's class entry.
func (c *Client) connections() (map[int]string, error) {
	entries, err := os.ReadDir(filepath.Join(c.sysRoot(), classConnection))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	conns := make(map[int]string)
	lowest := make(map[int]int)
	for _, e := range entries {
		sid, cid, ok := parseConnName(e.Name())
		if !ok {
			continue
		}
		if prev, seen := lowest[sid]; !seen || cid < prev {
			lowest[sid] = cid
			conns[sid] = e.Name()
		}
	}
	return conns, nil
}

func (c *Client) readSession(id int, conn string) (Session, error) {
	dir := filepath.Join(c.sysRoot(), classSession, "session"+strconv.Itoa(id))
	s := Session{ID: id, Host: -1}
	target, err := readAttr(dir, "targetname")
	if err != nil {
		return Session{}, err
	}
	s.Target.IQN = target
	// The rest is informational and some transports lack some of it.
	s.Iface, _ = readAttr(dir, "ifacename")
	s.InitiatorName, _ = readAttr(dir, "initiatorname")
	s.State, _ = readAttr(dir, "state")
	if v, err := readAttr(dir, "tpgt"); err == nil {
		s.TPGT, _ = strconv.Atoi(v)
	}
	if v, err := readAttr(dir, "recovery_tmo"); err == nil {
		if n, err := strconv.Atoi(v); err == nil {
			s.ReplacementTimeout = time.Duration(n) * time.Second
		}
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		s.Host = hostOf(real, id)
	}
	if conn != "" {
		cdir := filepath.Join(c.sysRoot(), classConnection, conn)
		addr, errA := readAttr(cdir, "persistent_address")
		port, errP := readAttr(cdir, "persistent_port")
		if errA == nil && errP == nil {
			s.Target.Portal = portalString(addr, port)
		}
	}
	return s, nil
}

// portalString renders sysfs's address and port canonically when they
// parse, so Target.same and Key match however the manifest spelled it.
func portalString(addr, port string) string {
	if a, err := netip.ParseAddr(addr); err == nil {
		if p, err := strconv.ParseUint(port, 10, 16); err == nil {
			return netip.AddrPortFrom(a.Unmap(), uint16(p)).String()
		}
	}
	if strings.Contains(addr, ":") {
		return "[" + addr + "]:" + port
	}
	return addr + ":" + port
}

// hostOf finds N in ".../hostN/sessionID/iscsi_session/sessionID".
func hostOf(path string, id int) int {
	parts := strings.Split(filepath.ToSlash(path), "/")
	want := "session" + strconv.Itoa(id)
	for i := 1; i < len(parts); i++ {
		if parts[i] == want {
			if h, ok := parseIndexed(parts[i-1], "host"); ok {
				return h
			}
		}
	}
	return -1
}

// sessionsFor returns the sessions to t.
func (c *Client) sessionsFor(t Target) ([]Session, error) {
	all, err := c.Sessions()
	if err != nil {
		return nil, err
	}
	var out []Session
	for _, s := range all {
		if s.Target.same(t) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Find looks up the LUN's block device through sysfs. found is false
// while the device is not usable yet: no session, LUN not scanned, or its
// /dev node missing or not the device sysfs names (a stale node left on a
// static /dev).
func (c *Client) Find(t Target, lun int) (Disk, bool, error) {
	if err := t.Validate(); err != nil {
		return Disk{}, false, err
	}
	sessions, err := c.sessionsFor(t)
	if err != nil {
		return Disk{}, false, fmt.Errorf("find %s: %w", Identity(t, lun), err)
	}
	for _, s := range sessions {
		d, ok, _, err := c.findIn(s, lun)
		if err != nil {
			return Disk{}, false, fmt.Errorf("find %s: %w", Identity(t, lun), err)
		}
		if ok {
			return d, true, nil
		}
	}
	return Disk{}, false, nil
}

// findIn looks for the LUN in one session; when it is not usable, why
// says what sysfs shows instead, for error messages.
func (c *Client) findIn(s Session, lun int) (d Disk, ok bool, why string, err error) {
	disks, err := c.disks(s)
	if err != nil {
		return Disk{}, false, "", err
	}
	var luns []string
	for _, d := range disks {
		if d.LUN != lun {
			luns = append(luns, strconv.Itoa(d.LUN))
			continue
		}
		switch present, err := c.devNodeMatches(d); {
		case err != nil:
			return Disk{}, false, "", err
		case !present:
			return Disk{}, false, fmt.Sprintf("sysfs has block device %s for it, but %s is missing or is another device", filepath.Base(d.Device), d.Device), nil
		}
		return d, true, "", nil
	}
	if len(luns) == 0 {
		return Disk{}, false, fmt.Sprintf("session %d has no LUN with a block device", s.ID), nil
	}
	return Disk{}, false, fmt.Sprintf("session %d has LUNs %s", s.ID, strings.Join(luns, ", ")), nil
}

// disks lists the LUNs of a session that have a block device.
func (c *Client) disks(s Session) ([]Disk, error) {
	dev := filepath.Join(c.sysRoot(), classSession, "session"+strconv.Itoa(s.ID), "device")
	targets, err := os.ReadDir(dev)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // logged out under us
	}
	if err != nil {
		return nil, err
	}
	var out []Disk
	for _, t := range targets {
		if _, _, _, ok := parseTargetDir(t.Name()); !ok {
			continue
		}
		units, err := os.ReadDir(filepath.Join(dev, t.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		for _, u := range units {
			h, ok := parseHCTL(u.Name())
			if !ok || h.lun > uint64(maxLUN) {
				continue
			}
			block := filepath.Join(dev, t.Name(), u.Name(), "block")
			names, err := os.ReadDir(block)
			if err != nil || len(names) == 0 {
				continue // not a disk, or still being probed
			}
			name := names[0].Name()
			major, minor, ok := parseDevNum(readAttrOr(filepath.Join(block, name), "dev"))
			if !ok {
				continue
			}
			sectors, _ := strconv.ParseInt(readAttrOr(filepath.Join(block, name), "size"), 10, 64)
			out = append(out, Disk{
				Device:    filepath.Join(c.devRoot(), name),
				SessionID: s.ID,
				LUN:       int(h.lun),
				SizeBytes: sectors * 512,
				Target:    s.Target,
				HCTL:      u.Name(),
				dev:       unix.Mkdev(major, minor),
				block:     filepath.Join(block, name),
			})
		}
	}
	slices.SortFunc(out, func(a, b Disk) int { return a.LUN - b.LUN })
	return out, nil
}

// maxLUN bounds LUNs to what an int holds on every platform we build for.
const maxLUN = 1<<31 - 1

// devNodeMatches reports whether the disk's /dev node exists and is the
// block device sysfs names. devtmpfs creates it as the disk appears, so
// no udev wait is involved.
func (c *Client) devNodeMatches(d Disk) (bool, error) {
	var st unix.Stat_t
	err := unix.Stat(d.Device, &st)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "stat", Path: d.Device, Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFBLK && st.Rdev == d.dev, nil
}

// readAttr reads a sysfs attribute, trimmed; "(null)" (an unset string
// parameter on some kernels) reads as "".
func readAttr(dir, name string) (string, error) {
	s, err := sysfs.Attr(dir, name)
	return cleanAttr(s), err
}

func readAttrOr(dir, name string) string {
	s, _ := readAttr(dir, name)
	return s
}

func cleanAttr(s string) string {
	s = strings.TrimSpace(s)
	if s == "(null)" {
		return ""
	}
	return s
}

// parseIndexed parses "session12" with prefix "session" as 12.
func parseIndexed(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	return parseSmall(rest)
}

// parseSmall parses a non-negative decimal that fits an int32, digits only.
func parseSmall(s string) (int, bool) {
	if s == "" || len(s) > 10 {
		return 0, false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 32)
	return int(n), err == nil
}

// parseConnName parses "connection1:0" into session 1, connection 0.
func parseConnName(name string) (sid, cid int, ok bool) {
	rest, ok := strings.CutPrefix(name, "connection")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, 0, false
	}
	sid, okA := parseSmall(a)
	cid, okB := parseSmall(b)
	return sid, cid, okA && okB
}

// hctl is a SCSI address.
type hctl struct {
	host, channel, target int
	lun                   uint64
}

func (h hctl) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", h.host, h.channel, h.target, h.lun)
}

// parseHCTL parses a SCSI device name "2:0:0:0". The LUN is 64 bits wide
// in the kernel.
func parseHCTL(name string) (hctl, bool) {
	parts := strings.Split(name, ":")
	if len(parts) != 4 {
		return hctl{}, false
	}
	var h hctl
	var ok [3]bool
	h.host, ok[0] = parseSmall(parts[0])
	h.channel, ok[1] = parseSmall(parts[1])
	h.target, ok[2] = parseSmall(parts[2])
	if !ok[0] || !ok[1] || !ok[2] || parts[3] == "" || strings.TrimLeft(parts[3], "0123456789") != "" {
		return hctl{}, false
	}
	lun, err := strconv.ParseUint(parts[3], 10, 64)
	if err != nil {
		return hctl{}, false
	}
	h.lun = lun
	return h, true
}

// parseTargetDir parses a SCSI target directory "target2:0:0".
func parseTargetDir(name string) (host, channel, target int, ok bool) {
	rest, ok := strings.CutPrefix(name, "target")
	if !ok {
		return 0, 0, 0, false
	}
	h, ok := parseHCTL(rest + ":0")
	return h.host, h.channel, h.target, ok
}

// parseDevNum parses a sysfs dev attribute, "8:16".
func parseDevNum(s string) (major, minor uint32, ok bool) {
	a, b, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	ma, okA := parseSmall(a)
	mi, okB := parseSmall(b)
	return uint32(ma), uint32(mi), okA && okB
}

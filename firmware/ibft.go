package firmware

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// maxAttrSize bounds a sysfs attribute read: the kernel fills at most
// one page.
const maxAttrSize = 4096

// iBFT flag bits shared by the target and NIC sections.
const (
	ibftFlagValid        = 1 << 0
	ibftFlagBootSelected = 1 << 1
)

// IBFT is the iSCSI Boot Firmware Table as the kernel's iscsi_ibft
// driver shows it under /sys/firmware/ibft. CHAP secrets are never read.
type IBFT struct {
	Initiator string // initiator-name
	Targets   []IBFTTarget
	NICs      []IBFTNIC
}

// IBFTTarget is one targetN directory.
type IBFTTarget struct {
	Name         string // "target0"
	Index        int
	Valid        bool // the firmware marked the block valid
	BootSelected bool // the firmware booted from it
	IP           string
	Port         int
	IQN          string // target-name
	// LUN decoded from the kernel's rendering (see decodeIBFTLUN), -1
	// when it cannot be; LUNText is the rendering itself.
	LUN             int
	LUNText         string
	NICIndex        int // nic-assoc: the Index of the IBFTNIC used
	CHAPType        int
	CHAPName        string
	ReverseCHAPName string
}

// IBFTNIC is one ethernetN directory.
type IBFTNIC struct {
	Name         string // "ethernet0"
	Index        int
	Valid        bool
	BootSelected bool
	IP           string
	PrefixLen    int
	Gateway      string
	PrimaryDNS   string
	SecondaryDNS string
	DHCP         string
	Origin       int
	VLAN         int
	MAC          string
	Hostname     string
	// Interface is the kernel's name for the NIC, from the device link
	// or else by MAC; "" when neither finds it.
	Interface string
}

// ReadIBFT reads root + /sys/firmware/ibft. A host without an iBFT (no
// such directory, or an empty one) gives nil, nil.
func ReadIBFT(root string) (*IBFT, error) {
	dir := filepath.Join(root, "/sys/firmware/ibft")
	entries, err := readDirIfAny(dir)
	if err != nil {
		return nil, fmt.Errorf("read iBFT: %w", err)
	}
	if len(entries) == 0 {
		return nil, nil
	}
	t := &IBFT{}
	a := attrReader{}
	t.Initiator = a.str(filepath.Join(dir, "initiator"), "initiator-name")
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		switch {
		case sectionNumber(e.Name(), "target") >= 0:
			if tgt, ok := readIBFTTarget(&a, sub, e.Name()); ok {
				t.Targets = append(t.Targets, tgt)
			}
		case sectionNumber(e.Name(), "ethernet") >= 0:
			t.NICs = append(t.NICs, readIBFTNIC(&a, root, sub, e.Name()))
		}
	}
	if a.err != nil {
		return nil, fmt.Errorf("read iBFT: %w", a.err)
	}
	sort.Slice(t.Targets, func(i, j int) bool {
		return sectionNumber(t.Targets[i].Name, "target") < sectionNumber(t.Targets[j].Name, "target")
	})
	sort.Slice(t.NICs, func(i, j int) bool {
		return sectionNumber(t.NICs[i].Name, "ethernet") < sectionNumber(t.NICs[j].Name, "ethernet")
	})
	return t, nil
}

// readIBFTTarget reads a target section; one without a target name is
// an unused slot and gives false.
func readIBFTTarget(a *attrReader, dir, name string) (IBFTTarget, bool) {
	t := IBFTTarget{Name: name, LUN: -1}
	t.IQN = a.str(dir, "target-name")
	if t.IQN == "" {
		return t, false
	}
	t.Index = a.num(dir, "index")
	flags, hasFlags := a.optNum(dir, "flags")
	t.Valid = !hasFlags || flags&ibftFlagValid != 0
	t.BootSelected = flags&ibftFlagBootSelected != 0
	t.IP = a.ip(dir, "ip-addr", true)
	t.Port = a.num(dir, "port")
	t.LUNText = a.str(dir, "lun")
	t.LUN = decodeIBFTLUN(t.LUNText)
	t.NICIndex = a.num(dir, "nic-assoc")
	t.CHAPType, _ = a.optNum(dir, "chap-type")
	// chap-secret and rev-chap-name-secret are deliberately not read.
	t.CHAPName = a.str(dir, "chap-name")
	t.ReverseCHAPName = a.str(dir, "rev-chap-name")
	return t, true
}

func readIBFTNIC(a *attrReader, root, dir, name string) IBFTNIC {
	n := IBFTNIC{Name: name}
	n.Index = a.num(dir, "index")
	flags, hasFlags := a.optNum(dir, "flags")
	n.Valid = !hasFlags || flags&ibftFlagValid != 0
	n.BootSelected = flags&ibftFlagBootSelected != 0
	// The kernel hides address attributes the firmware left zero.
	n.IP = a.ip(dir, "ip-addr", false)
	n.PrefixLen, _ = a.optNum(dir, "prefix-len")
	n.Gateway = a.ip(dir, "gateway", false)
	n.PrimaryDNS = a.ip(dir, "primary-dns", false)
	n.SecondaryDNS = a.ip(dir, "secondary-dns", false)
	n.DHCP = a.ip(dir, "dhcp", false)
	n.Origin, _ = a.optNum(dir, "origin")
	n.VLAN, _ = a.optNum(dir, "vlan")
	n.MAC = strings.ToLower(a.str(dir, "mac"))
	n.Hostname = a.str(dir, "hostname")
	n.Interface = ifaceFromDevice(dir)
	if n.Interface == "" {
		n.Interface = ifaceByMAC(root, n.MAC)
	}
	return n
}

// sectionNumber returns N for a directory named prefix+N, else -1.
func sectionNumber(name, prefix string) int {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return -1
	}
	return n
}

// decodeIBFTLUN undoes the kernel's rendering of the 8-byte SAM LUN,
// which prints each byte with %x and no padding, so "01000000" is
// bytes 00 01 00... (LUN 1). That rendering is ambiguous in general; it
// is decoded for the single-level LUNs firmware uses in practice
// (bytes 2-7 zero), with peripheral addressing (byte 0 zero: LUN is
// byte 1) or flat addressing (byte 0 is 0x40-0x7f: LUN is its low six
// bits and byte 1). Anything else gives -1.
func decodeIBFTLUN(s string) int {
	prefix, ok := strings.CutSuffix(s, "000000")
	if !ok || len(prefix) < 2 || len(prefix) > 4 {
		return -1
	}
	if prefix[0] == '0' {
		// A nonzero byte never renders with a leading zero, so byte 0
		// is 0 and the rest is byte 1.
		b1, err := strconv.ParseUint(prefix[1:], 16, 8)
		if err != nil {
			return -1
		}
		return int(b1)
	}
	if len(prefix) < 3 || prefix[0] < '4' || prefix[0] > '7' {
		return -1
	}
	b0, err0 := strconv.ParseUint(prefix[:2], 16, 8)
	b1, err1 := strconv.ParseUint(prefix[2:], 16, 8)
	if err0 != nil || err1 != nil {
		return -1
	}
	return int(b0&0x3f)<<8 | int(b1)
}

// attrReader reads sysfs attributes and keeps the first error, so a
// section reads as a list of fields; missing attributes read as empty.
type attrReader struct{ err error }

func (a *attrReader) read(dir, name string) (string, bool) {
	path := filepath.Join(dir, name)
	s, ok, err := readSmallFile(path)
	if err != nil && a.err == nil {
		a.err = err
	}
	return s, ok
}

func (a *attrReader) str(dir, name string) string {
	s, _ := a.read(dir, name)
	return s
}

func (a *attrReader) optNum(dir, name string) (int, bool) {
	s, ok := a.read(dir, name)
	if !ok || s == "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		if a.err == nil {
			a.err = fmt.Errorf("%s: %q is not a number", filepath.Join(dir, name), s)
		}
		return 0, false
	}
	return n, true
}

// num reads an attribute the kernel always creates.
func (a *attrReader) num(dir, name string) int {
	n, ok := a.optNum(dir, name)
	if !ok && a.err == nil {
		a.err = fmt.Errorf("%s: missing", filepath.Join(dir, name))
	}
	return n
}

// ip reads an address attribute in canonical form; the kernel prints
// IPv6 unabbreviated.
func (a *attrReader) ip(dir, name string, required bool) string {
	s, ok := a.read(dir, name)
	if !ok || s == "" {
		if required && a.err == nil {
			a.err = fmt.Errorf("%s: missing", filepath.Join(dir, name))
		}
		return ""
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		if a.err == nil {
			a.err = fmt.Errorf("%s: %q is not an IP address", filepath.Join(dir, name), s)
		}
		return ""
	}
	addr = addr.Unmap()
	if addr.IsUnspecified() {
		return ""
	}
	return addr.String()
}

// readSmallFile reads a one-value file (sysfs attribute or /etc file)
// with its trailing newline and NUL padding removed. A missing file
// gives "", false, nil.
func readSmallFile(path string) (string, bool, error) {
	b, err := readLimited(path, maxAttrSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	return strings.TrimRight(string(b), "\x00\r\n\t "), true, nil
}

// readLimited reads path, refusing one longer than max bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: longer than %d bytes", path, limit)
	}
	return b, nil
}

// readDirIfAny lists dir sorted by name; a missing dir gives nil, nil.
func readDirIfAny(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}

// ifaceFromDevice follows ethernetN/device to the PCI function and
// returns its network interface: device/net/<name> on current kernels,
// device/net:<name> on old ones.
func ifaceFromDevice(dir string) string {
	dev := filepath.Join(dir, "device")
	if entries, err := os.ReadDir(filepath.Join(dev, "net")); err == nil && len(entries) > 0 {
		return entries[0].Name()
	}
	entries, err := os.ReadDir(dev)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if name, ok := strings.CutPrefix(e.Name(), "net:"); ok {
			return name
		}
	}
	return ""
}

// ifaceByMAC finds the interface under root + /sys/class/net with the
// given MAC. VLAN and bond interfaces share their parent's MAC, so one
// backed by a device is preferred.
func ifaceByMAC(root, mac string) string {
	if mac == "" {
		return ""
	}
	dir := filepath.Join(root, "/sys/class/net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	found := ""
	for _, e := range entries {
		addr, _, err := readSmallFile(filepath.Join(dir, e.Name(), "address"))
		if err != nil || !strings.EqualFold(addr, mac) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "device")); err == nil {
			return e.Name()
		}
		if found == "" {
			found = e.Name()
		}
	}
	return found
}

package firmware

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Where each part of a HostIdentity came from.
const (
	FromInitiatorFile = "/etc/iscsi/initiatorname.iscsi"
	FromHostNQNFile   = "/etc/nvme/hostnqn"
	FromHostIDFile    = "/etc/nvme/hostid"
	FromIBFT          = "ibft"
	FromNBFT          = "nbft"
	FromHostNQN       = "hostnqn"          // the uuid inside a nqn.2014-08.org.nvmexpress:uuid: host NQN
	FromDMI           = "dmi product_uuid" // /sys/class/dmi/id/product_uuid
	FromMachineID     = "machine-id"       // /etc/machine-id, hashed
)

const (
	// uuidNQNPrefix is the NVMe Base Specification's form for a host
	// NQN built from a UUID, the one `nvme gen-hostnqn` writes.
	uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"
	// initiatorPrefix is the naming authority iscsi-iname uses by
	// default, so a derived name looks like one open-iscsi generated.
	initiatorPrefix = "iqn.2016-04.com.open-iscsi:"
	// maxNameLen: iSCSI names and NQNs are at most 223 bytes.
	maxNameLen = 223
)

// placeholderUUIDs are product_uuid values that boards ship unset or
// shared by every unit; deriving an identity from them would give a
// fleet one identity.
var placeholderUUIDs = map[string]bool{
	"00000000-0000-0000-0000-000000000000": true,
	"ffffffff-ffff-ffff-ffff-ffffffffffff": true,
	"03000200-0400-0500-0006-000700080009": true,
	"00020003-0004-0005-0006-000700080009": true,
}

// ErrNoIdentity: the host has no configured identity and nothing stable
// to derive one from. An identity is never made up at random.
var ErrNoIdentity = errors.New("no stable source for a host identity")

// HostIdentity is the names this host uses towards storage targets,
// each with where it came from (one of the From* constants).
type HostIdentity struct {
	InitiatorName     string
	InitiatorNameFrom string
	HostNQN           string
	HostNQNFrom       string
	HostID            string // UUID, lower case
	HostIDFrom        string
}

// LoadHostIdentity works out the host's identity under root ("" or "/"
// for the running system). Each name is taken, in order, from what the
// host is configured with (/etc/iscsi/initiatorname.iscsi,
// /etc/nvme/hostnqn, /etc/nvme/hostid), from the boot firmware tables
// (iBFT, NBFT), and else derived from /sys/class/dmi/id/product_uuid
// (or, without a usable one, a hash of /etc/machine-id), so the same
// host always gets the same identity. The host ID follows the host NQN
// it goes with: the firmware's ID with the firmware's NQN, the uuid in
// a uuid-form NQN, else the derived UUID.
//
// A configured file that is present but malformed is an error, as is a
// firmware table that is needed but unreadable: falling through to a
// derived name would make the host speak with an identity its
// configuration or firmware does not know.
func LoadHostIdentity(root string) (HostIdentity, error) {
	l := identityLoader{root: root}
	var id HostIdentity
	var err error
	if id.InitiatorName, id.InitiatorNameFrom, err = l.initiatorName(); err != nil {
		return id, fmt.Errorf("initiator name: %w", err)
	}
	if id.HostNQN, id.HostNQNFrom, err = l.hostNQN(); err != nil {
		return id, fmt.Errorf("host NQN: %w", err)
	}
	if id.HostID, id.HostIDFrom, err = l.hostID(id.HostNQN, id.HostNQNFrom); err != nil {
		return id, fmt.Errorf("host ID: %w", err)
	}
	return id, nil
}

// identityLoader reads each source at most once.
type identityLoader struct {
	root string

	nbftDone bool
	nbft     *NBFTHost
	nbftErr  error

	uuidDone bool
	uuid     string
	uuidFrom string
	uuidErr  error
}

func (l *identityLoader) path(p string) string { return filepath.Join(l.root, p) }

func (l *identityLoader) initiatorName() (string, string, error) {
	name, err := readInitiatorFile(l.path(FromInitiatorFile))
	if err != nil || name != "" {
		return name, FromInitiatorFile, err
	}
	ibft, err := ReadIBFT(l.root)
	if err != nil {
		return "", "", err
	}
	if ibft != nil && ibft.Initiator != "" {
		if err := checkISCSIName(ibft.Initiator); err != nil {
			return "", "", fmt.Errorf("iBFT initiator-name: %w", err)
		}
		return ibft.Initiator, FromIBFT, nil
	}
	u, from, err := l.derivedUUID()
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256([]byte(u))
	return initiatorPrefix + hex.EncodeToString(sum[:6]), from, nil
}

func (l *identityLoader) hostNQN() (string, string, error) {
	path := l.path(FromHostNQNFile)
	nqn, ok, err := readSmallFile(path)
	if err != nil {
		return "", "", err
	}
	if ok && nqn != "" {
		if err := checkNQN(nqn); err != nil {
			return "", "", fmt.Errorf("%s: %w", path, err)
		}
		return nqn, FromHostNQNFile, nil
	}
	if h, err := l.nbftHost(); err != nil {
		return "", "", err
	} else if h != nil && h.NQN != "" {
		if err := checkNQN(h.NQN); err != nil {
			return "", "", fmt.Errorf("NBFT host NQN: %w", err)
		}
		return h.NQN, FromNBFT, nil
	}
	u, from, err := l.derivedUUID()
	if err != nil {
		return "", "", err
	}
	return uuidNQNPrefix + u, from, nil
}

func (l *identityLoader) hostID(nqn, nqnFrom string) (string, string, error) {
	path := l.path(FromHostIDFile)
	s, ok, err := readSmallFile(path)
	if err != nil {
		return "", "", err
	}
	if ok && s != "" {
		u, err := parseUUID(s)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", path, err)
		}
		return formatUUID(u), FromHostIDFile, nil
	}
	if nqnFrom == FromNBFT {
		if h, _ := l.nbftHost(); h != nil && h.ID != ([16]byte{}) {
			return formatUUID(h.ID), FromNBFT, nil
		}
	}
	if rest, ok := strings.CutPrefix(nqn, uuidNQNPrefix); ok {
		if u, err := parseUUID(rest); err == nil {
			from := FromHostNQN
			if nqnFrom == FromDMI || nqnFrom == FromMachineID {
				from = nqnFrom
			}
			return formatUUID(u), from, nil
		}
	}
	// The firmware's ID is not paired with a host NQN from elsewhere:
	// the kernel refuses a second host NQN with a host ID already in use.
	return l.derivedUUID()
}

func (l *identityLoader) nbftHost() (*NBFTHost, error) {
	if !l.nbftDone {
		l.nbftDone = true
		var tables []*NBFT
		tables, l.nbftErr = ReadNBFT(l.root)
		l.nbft = primaryHost(tables)
	}
	return l.nbft, l.nbftErr
}

// derivedUUID returns the stable UUID derived names are built from:
// product_uuid itself when it is a real one (as `nvme gen-hostnqn`
// does), else a version 8 UUID hashed from /etc/machine-id (hashed so
// the machine ID itself is not published, as systemd asks).
func (l *identityLoader) derivedUUID() (string, string, error) {
	if l.uuidDone {
		return l.uuid, l.uuidFrom, l.uuidErr
	}
	l.uuidDone = true
	dmiPath := l.path("/sys/class/dmi/id/product_uuid")
	s, _, dmiErr := readSmallFile(dmiPath)
	if dmiErr == nil && s != "" {
		if u, err := parseUUID(s); err == nil && !placeholderUUIDs[formatUUID(u)] {
			l.uuid, l.uuidFrom = formatUUID(u), FromDMI
			return l.uuid, l.uuidFrom, nil
		}
	}
	midPath := l.path("/etc/machine-id")
	mid, _, err := readSmallFile(midPath)
	if err == nil && isMachineID(mid) {
		sum := sha256.Sum256([]byte("volumed host identity\x00" + mid))
		var u [16]byte
		copy(u[:], sum[:16])
		u[6] = u[6]&0x0f | 0x80 // version 8: vendor-defined
		u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
		l.uuid, l.uuidFrom = formatUUID(u), FromMachineID
		return l.uuid, l.uuidFrom, nil
	}
	l.uuidErr = fmt.Errorf("%w: %s is missing, unreadable or a placeholder, and %s is missing or not initialized",
		ErrNoIdentity, dmiPath, midPath)
	return "", "", l.uuidErr
}

// readInitiatorFile returns the InitiatorName= value of an open-iscsi
// initiatorname.iscsi, or "" when the file is missing or does not set
// one yet (Debian ships GenerateName=yes until iscsid first runs).
func readInitiatorFile(path string) (string, error) {
	content, ok, err := readSmallFile(path)
	if err != nil || !ok {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, found := strings.CutPrefix(line, "InitiatorName=")
		if !found {
			continue
		}
		name = strings.TrimSpace(name)
		if err := checkISCSIName(name); err != nil {
			return "", fmt.Errorf("%s: InitiatorName: %w", path, err)
		}
		return name, nil
	}
	return "", nil
}

func checkISCSIName(name string) error {
	lower := strings.ToLower(name)
	if !strings.HasPrefix(lower, "iqn.") && !strings.HasPrefix(lower, "eui.") && !strings.HasPrefix(lower, "naa.") {
		return fmt.Errorf(`%q does not start with "iqn.", "eui." or "naa."`, name)
	}
	return checkName(name)
}

func checkNQN(nqn string) error {
	if !strings.HasPrefix(nqn, "nqn.") {
		return fmt.Errorf(`%q does not start with "nqn."`, nqn)
	}
	return checkName(nqn)
}

func checkName(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("%q is longer than %d bytes", name, maxNameLen)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%q contains a space or control character", name)
		}
	}
	return nil
}

func isMachineID(s string) bool {
	if len(s) != 32 || strings.Trim(s, "0") == "" {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// parseUUID accepts the 8-4-4-4-12 hex form, in either case.
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	b, err := hex.DecodeString(s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36])
	if err != nil {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	copy(u[:], b)
	return u, nil
}

func formatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

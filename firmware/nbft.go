package firmware

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The NVMe-oF Boot Firmware Table, as laid out by the NVM Express Boot
// Specification 1.0 (figures 8-24) and as libnvme's nbft.h declares it.
// Every multi-byte field is little-endian and the structures are packed.
// Offsets in heap object references count from byte 0 of the table.
//
// Where firmware in the field differs, or the specification leaves room,
// this parser takes the reading that cannot go wrong silently:
//   - heap strings end at the first NUL or at the object's end, whether
//     or not the length counts the NUL;
//   - the SSNS transport address is a 16-byte IPv6/IPv4-mapped address
//     (as libnvme reads it), or else IP address text;
//   - descriptor lists are walked with the length the control
//     descriptor declares, which must cover the fields read here;
//   - descriptor indexes are kept as the table gives them; one that
//     refers to nothing is not an error (libnvme only logs it).
const (
	nbftSignature = "NBFT"
	// nbftHeaderLen: the 36-byte ACPI header, heap offset and length,
	// the driver signature heap object, the minor revision and 13
	// reserved bytes.
	nbftHeaderLen = 64

	// Each min* is the length up to and including the last field this
	// parser reads, so a descriptor the table declares shorter than that
	// is refused before anything past its end is touched. The
	// specification's full lengths are longer (control 64, host 32,
	// HFI 32, HFI TCP info 128, SSNS 128, security 64, discovery 32);
	// the rest is reserved.
	minControl   = 48
	minHost      = 24
	minHFI       = 22
	minHFITCP    = 110
	minSSNS      = 66
	minSSNSExt   = 18
	minSecurity  = 42
	minDiscovery = 18

	// maxNBFTSize bounds what ReadNBFT loads: heap objects have 16-bit
	// lengths and there are at most 255 descriptors of each kind, so a
	// genuine table is a few kilobytes.
	maxNBFTSize = 1 << 20
)

// Structure IDs (figure 5).
const (
	nbftIDControl   = 1
	nbftIDHost      = 2
	nbftIDHFI       = 3
	nbftIDSSNS      = 4
	nbftIDSecurity  = 5
	nbftIDDiscovery = 6
	nbftIDHFITCP    = 7
	nbftIDSSNSExt   = 9

	nbftTransportTCP = 3
)

// ErrInvalidTable marks a firmware table that is malformed: truncated,
// with a bad checksum or signature, or with an offset or length that
// points outside the table. Nothing of such a table is trusted.
var ErrInvalidTable = errors.New("invalid firmware table")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidTable}, a...)...)
}

// NBFT is one parsed NVMe-oF Boot Firmware Table. Descriptors whose
// Valid flag is clear are left out of the lists; indexes are the
// descriptors' own index fields, which other descriptors refer to.
type NBFT struct {
	Source        string // file it was read from ("" from ParseNBFT)
	MajorRevision int
	MinorRevision int
	OEMID         string
	OEMTableID    string
	// Valid is the control descriptor's Block Valid flag. A table
	// without it describes nothing and every list below is empty.
	Valid      bool
	Host       NBFTHost
	HFIs       []NBFTHFI
	Subsystems []NBFTSubsystem
	Security   []NBFTSecurity
	Discovery  []NBFTDiscovery
}

// PrimaryAdmin is the host descriptor's hint about which of several
// tables names the host's identity.
type PrimaryAdmin int

const (
	PrimaryAdminNotIndicated PrimaryAdmin = 0
	PrimaryAdminUnselected   PrimaryAdmin = 1
	PrimaryAdminSelected     PrimaryAdmin = 2
)

// NBFTHost is the host descriptor: the identity the pre-OS driver
// connected with.
type NBFTHost struct {
	Valid         bool
	ID            [16]byte
	NQN           string
	IDConfigured  bool // set by an administrator, not a driver default
	NQNConfigured bool
	PrimaryAdmin  PrimaryAdmin
}

// NBFTHFI is a host fabric interface: the NIC the pre-OS driver used.
type NBFTHFI struct {
	Index     int
	Transport string      // "tcp", or "trtype N" for one this parser does not know
	TCP       *NBFTHFITCP // nil unless Transport is "tcp" and the table carries the info
}

// NBFTHFITCP is the NVMe/TCP transport info of an HFI. Addresses are
// empty when the table leaves them zero.
type NBFTHFITCP struct {
	PCISBDF      uint32 // segment<<16 | bus<<8 | device<<3 | function
	MAC          string
	VLAN         int
	IPOrigin     int
	IP           string
	PrefixLen    int
	Gateway      string
	RouteMetric  int
	PrimaryDNS   string
	SecondaryDNS string
	DHCPServer   string // only when DHCPOverride
	DHCPOverride bool   // the settings came from DHCP
	GlobalRoute  bool   // the pre-OS driver used this HFI as the default route
	HostName     string
}

// Namespace availability as the pre-OS driver saw it (SSNS flags).
const (
	NamespaceAvailabilityNotIndicated = 0
	NamespaceAvailable                = 1
	NamespaceUnavailable              = 2
)

// NBFTSubsystem is a subsystem namespace (SSNS) descriptor: one
// namespace the host was given to boot from, and where it lives.
type NBFTSubsystem struct {
	Index     int
	Transport string // "tcp", or "trtype N"
	Address   string // transport address (an IP address for TCP)
	TrSvcID   string // transport service id (the TCP port, as text)
	PortID    int    // subsystem port id
	NQN       string
	NSID      int
	// NID is the namespace's unique identifier in the form of
	// /sys/block/nvmeXnY/wwid: "uuid.<uuid>" or "eui.<hex>"; "" when the
	// table gives none.
	NID              string
	HFIIndex         int   // primary HFI
	SecondaryHFIs    []int // further HFI indexes
	DiscoveryIndex   int   // 0: none
	SecurityIndex    int   // 0: none
	NonBootable      bool  // administrative namespace, not necessarily connected
	Discovered       bool  // found through a discovery controller
	Availability     int   // NamespaceAvailable...
	HeaderDigest     bool
	DataDigest       bool
	ControllerID     int    // from the extended info, 0 if none
	AdminQueueSize   int    // ASQSZ from the extended info when set by an administrator
	DHCPRootPath     string // from the extended info
	SeparateDiscCtrl bool   // discovery controller is on another address
}

// NBFTSecurity is a security profile descriptor. It holds policy and,
// at most, a URI naming where a key is kept; never a key.
type NBFTSecurity struct {
	Index      int
	Flags      int
	SecretType int
	KeyPath    string // URI of the secret, per SecretType
	// Algorithm identifier lists as the table gives them.
	SecureChannelAlgorithms []byte
	AuthProtocols           []byte
	CipherSuites            []byte
	DHGroups                []byte
	HashFunctions           []byte
}

// NBFTDiscovery is a discovery controller the pre-OS driver used.
type NBFTDiscovery struct {
	Index         int
	HFIIndex      int
	SecurityIndex int
	URI           string
	NQN           string
}

// ReadNBFT reads and parses every NBFT under root + /sys/firmware/acpi/tables
// (the kernel names a lone table NBFT and several NBFT1, NBFT2, ...). No
// tables directory or no NBFT gives nil, nil. A table that fails to
// parse is reported in the error; the others are still returned, so a
// caller can pin what it can and still know the picture is incomplete.
func ReadNBFT(root string) ([]*NBFT, error) {
	dir := filepath.Join(root, "/sys/firmware/acpi/tables")
	entries, err := readDirIfAny(dir)
	if err != nil {
		return nil, fmt.Errorf("read NBFT: %w", err)
	}
	var tables []*NBFT
	var errs []error
	for _, e := range entries { // sorted by name
		if !strings.HasPrefix(e.Name(), nbftSignature) || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := readLimited(path, maxNBFTSize)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t, err := ParseNBFT(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		t.Source = path
		tables = append(tables, t)
	}
	return tables, errors.Join(errs...)
}

// nbftParser holds a table whose length, checksum and heap bounds have
// been checked; its methods hand out only sub-slices that lie inside it.
type nbftParser struct {
	b                []byte
	heapOff, heapEnd uint64
}

// ParseNBFT parses a raw NBFT. It is strict about structure: the header
// length must equal len(b), the checksum must hold, and every descriptor
// and heap object must lie inside the table (heap objects inside the
// heap); any violation rejects the whole table with ErrInvalidTable.
// It is lenient about meaning: a dangling index between descriptors is
// kept as given, and descriptors not marked valid are skipped.
func ParseNBFT(b []byte) (*NBFT, error) {
	if len(b) < nbftHeaderLen {
		return nil, invalid("table is %d bytes, shorter than the %d-byte NBFT header", len(b), nbftHeaderLen)
	}
	if sig := string(b[0:4]); sig != nbftSignature {
		return nil, invalid("signature %q, want %q", sig, nbftSignature)
	}
	if n := le32(b, 4); uint64(n) != uint64(len(b)) {
		return nil, invalid("header length %d but the table has %d bytes", n, len(b))
	}
	var sum byte
	for _, c := range b {
		sum += c
	}
	if sum != 0 {
		return nil, invalid("checksum does not add up (sum %#02x, checksum byte %#02x)", sum, b[9])
	}
	t := &NBFT{
		MajorRevision: int(b[8]),
		MinorRevision: int(b[50]),
		OEMID:         acpiString(b[10:16]),
		OEMTableID:    acpiString(b[16:24]),
	}
	// A later major revision is not compatible by definition; minor
	// revisions are, per the specification.
	if t.MajorRevision != 1 {
		return nil, invalid("major revision %d, only 1 is supported", t.MajorRevision)
	}
	p := &nbftParser{b: b}
	heapOff, heapLen := uint64(le32(b, 36)), uint64(le32(b, 40))
	if heapLen > 0 {
		if heapOff < nbftHeaderLen || heapOff+heapLen > uint64(len(b)) {
			return nil, invalid("heap at offset %d length %d lies outside the table (%d bytes, header %d)", heapOff, heapLen, len(b), nbftHeaderLen)
		}
		p.heapOff, p.heapEnd = heapOff, heapOff+heapLen
	}

	ctl, err := p.region("control descriptor", nbftHeaderLen, minControl)
	if err != nil {
		return nil, err
	}
	if ctl[6]&1 == 0 {
		return t, nil
	}
	t.Valid = true
	if ctl[0] != nbftIDControl {
		return nil, invalid("control descriptor: structure id %d, want %d", ctl[0], nbftIDControl)
	}
	if csl := le16(ctl, 4); csl < minControl {
		return nil, invalid("control descriptor: length %d is shorter than %d", csl, minControl)
	} else if _, err := p.region("control descriptor", nbftHeaderLen, uint64(csl)); err != nil {
		return nil, err
	}

	if err := p.host(ctl, &t.Host); err != nil {
		return nil, err
	}
	if t.HFIs, err = parseList(p, ctl, 16, "HFI", minHFI, p.hfi); err != nil {
		return nil, err
	}
	if t.Subsystems, err = parseList(p, ctl, 24, "SSNS", minSSNS, p.ssns); err != nil {
		return nil, err
	}
	if t.Security, err = parseList(p, ctl, 32, "security", minSecurity, p.security); err != nil {
		return nil, err
	}
	if t.Discovery, err = parseList(p, ctl, 40, "discovery", minDiscovery, p.discovery); err != nil {
		return nil, err
	}
	return t, nil
}

// region returns n bytes at off, which must lie after the header and
// inside the table.
func (p *nbftParser) region(what string, off, n uint64) ([]byte, error) {
	if off < nbftHeaderLen || off+n > uint64(len(p.b)) {
		return nil, invalid("%s at offset %d length %d lies outside the table (%d bytes)", what, off, n, len(p.b))
	}
	return p.b[off : off+n], nil
}

// heapObj resolves the heap object reference (offset u32, length u16)
// at d[at:]. A zero length means none and gives nil.
func (p *nbftParser) heapObj(what string, d []byte, at int) ([]byte, error) {
	off, n := uint64(le32(d, at)), uint64(le16(d, at+4))
	if n == 0 {
		return nil, nil
	}
	if off < p.heapOff || off+n > p.heapEnd {
		return nil, invalid("%s: heap object at offset %d length %d lies outside the heap (offset %d length %d)",
			what, off, n, p.heapOff, p.heapEnd-p.heapOff)
	}
	return p.b[off : off+n], nil
}

// heapString resolves a heap object holding text. The specification's
// strings are NUL-terminated, but whether the length counts the NUL
// differs between firmware; the text ends at the first NUL or at the
// object's end, whichever comes first.
func (p *nbftParser) heapString(what string, d []byte, at int) (string, error) {
	obj, err := p.heapObj(what, d, at)
	if err != nil {
		return "", err
	}
	if i := strings.IndexByte(string(obj), 0); i >= 0 {
		obj = obj[:i]
	}
	if !utf8.Valid(obj) {
		return "", invalid("%s: not UTF-8 text", what)
	}
	return string(obj), nil
}

// parseList walks the descriptor list whose offset (u32), per-descriptor
// length (u16), version (u8) and count (u8) sit at ctl[at:]. Each entry
// is parsed by one; one reports false for a descriptor marked invalid.
func parseList[T any](p *nbftParser, ctl []byte, at int, kind string, minLen int,
	one func(what string, d []byte) (T, bool, error)) ([]T, error) {
	off, size, count := uint64(le32(ctl, at)), uint64(le16(ctl, at+4)), uint64(ctl[at+7])
	if count == 0 {
		return nil, nil
	}
	if size < uint64(minLen) {
		return nil, invalid("%s descriptor length %d is shorter than %d", kind, size, minLen)
	}
	all, err := p.region(kind+" descriptor list", off, size*count)
	if err != nil {
		return nil, err
	}
	var out []T
	for i := range count {
		what := fmt.Sprintf("%s descriptor %d", kind, i)
		v, ok, err := one(what, all[i*size:(i+1)*size])
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, v)
		}
	}
	return out, nil
}

func checkID(what string, d []byte, want byte) error {
	if d[0] != want {
		return invalid("%s: structure id %d, want %d", what, d[0], want)
	}
	return nil
}

func (p *nbftParser) host(ctl []byte, h *NBFTHost) error {
	off, n := uint64(le32(ctl, 8)), uint64(le16(ctl, 12))
	if n < minHost {
		return invalid("host descriptor length %d is shorter than %d", n, minHost)
	}
	d, err := p.region("host descriptor", off, n)
	if err != nil {
		return err
	}
	if d[1]&1 == 0 {
		return nil
	}
	if err := checkID("host descriptor", d, nbftIDHost); err != nil {
		return err
	}
	h.Valid = true
	h.IDConfigured = d[1]&(1<<1) != 0
	h.NQNConfigured = d[1]&(1<<2) != 0
	h.PrimaryAdmin = PrimaryAdmin(d[1] >> 3 & 3)
	copy(h.ID[:], d[2:18])
	h.NQN, err = p.heapString("host descriptor: host NQN", d, 18)
	return err
}

func (p *nbftParser) hfi(what string, d []byte) (NBFTHFI, bool, error) {
	if d[2]&1 == 0 {
		return NBFTHFI{}, false, nil
	}
	if err := checkID(what, d, nbftIDHFI); err != nil {
		return NBFTHFI{}, false, err
	}
	h := NBFTHFI{Index: int(d[1]), Transport: transportName(d[3])}
	if d[3] != nbftTransportTCP {
		return h, true, nil
	}
	info, err := p.heapObj(what+": transport info", d, 16)
	if err != nil {
		return h, false, err
	}
	if info == nil {
		return h, true, nil
	}
	what += ": TCP transport info"
	if len(info) < minHFITCP {
		return h, false, invalid("%s: length %d is shorter than %d", what, len(info), minHFITCP)
	}
	if info[6]&1 == 0 {
		return h, true, nil
	}
	if err := checkID(what, info, nbftIDHFITCP); err != nil {
		return h, false, err
	}
	tcp := &NBFTHFITCP{
		PCISBDF:      le32(info, 7),
		MAC:          net.HardwareAddr(info[11:17]).String(),
		VLAN:         int(le16(info, 17)),
		IPOrigin:     int(info[19]),
		IP:           ip16(info[20:36]),
		PrefixLen:    int(info[36]),
		Gateway:      ip16(info[37:53]),
		RouteMetric:  int(le16(info, 54)),
		PrimaryDNS:   ip16(info[56:72]),
		SecondaryDNS: ip16(info[72:88]),
		GlobalRoute:  info[6]&(1<<1) != 0,
		DHCPOverride: info[6]&(1<<2) != 0,
	}
	if tcp.DHCPOverride {
		tcp.DHCPServer = ip16(info[88:104])
	}
	if tcp.HostName, err = p.heapString(what+": host name", info, 104); err != nil {
		return h, false, err
	}
	h.TCP = tcp
	return h, true, nil
}

func (p *nbftParser) ssns(what string, d []byte) (NBFTSubsystem, bool, error) {
	flags := le16(d, 3)
	if flags&1 == 0 {
		return NBFTSubsystem{}, false, nil
	}
	if err := checkID(what, d, nbftIDSSNS); err != nil {
		return NBFTSubsystem{}, false, err
	}
	s := NBFTSubsystem{
		Index:            int(le16(d, 1)),
		Transport:        transportName(d[5]),
		DiscoveryIndex:   int(d[8]),
		PortID:           int(le16(d, 22)),
		NSID:             int(le32(d, 24)),
		NID:              formatNID(d[28], d[29:45]),
		HFIIndex:         int(d[46]),
		NonBootable:      flags&(1<<1) != 0,
		SeparateDiscCtrl: flags&(1<<5) != 0,
		Discovered:       flags&(1<<6) != 0,
		Availability:     int(flags >> 7 & 3),
	}
	if flags&(1<<2) != 0 {
		s.SecurityIndex = int(d[45])
	}
	if d[5] == nbftTransportTCP {
		trflags := le16(d, 6)
		s.HeaderDigest = trflags&(1<<1) != 0
		s.DataDigest = trflags&(1<<2) != 0
	}
	addr, err := p.heapObj(what+": transport address", d, 10)
	if err != nil {
		return s, false, err
	}
	if s.Address, err = transportAddress(what, addr); err != nil {
		return s, false, err
	}
	if s.TrSvcID, err = p.heapString(what+": transport service id", d, 16); err != nil {
		return s, false, err
	}
	hfis, err := p.heapObj(what+": secondary HFI associations", d, 48)
	if err != nil {
		return s, false, err
	}
	for _, i := range hfis {
		s.SecondaryHFIs = append(s.SecondaryHFIs, int(i))
	}
	if s.NQN, err = p.heapString(what+": subsystem NQN", d, 54); err != nil {
		return s, false, err
	}
	if flags&(1<<4) != 0 {
		if err := p.ssnsExt(what+": extended info", d, &s); err != nil {
			return s, false, err
		}
	}
	return s, true, nil
}

func (p *nbftParser) ssnsExt(what string, d []byte, s *NBFTSubsystem) error {
	ext, err := p.heapObj(what, d, 60)
	if err != nil || ext == nil {
		return err
	}
	if len(ext) < minSSNSExt {
		return invalid("%s: length %d is shorter than %d", what, len(ext), minSSNSExt)
	}
	flags := le32(ext, 4)
	if flags&1 == 0 {
		return nil
	}
	if err := checkID(what, ext, nbftIDSSNSExt); err != nil {
		return err
	}
	s.ControllerID = int(le16(ext, 8))
	if flags&(1<<1) != 0 {
		s.AdminQueueSize = int(le16(ext, 10))
	}
	s.DHCPRootPath, err = p.heapString(what+": DHCP root path", ext, 12)
	return err
}

func (p *nbftParser) security(what string, d []byte) (NBFTSecurity, bool, error) {
	flags := le16(d, 2)
	if flags&1 == 0 {
		return NBFTSecurity{}, false, nil
	}
	if err := checkID(what, d, nbftIDSecurity); err != nil {
		return NBFTSecurity{}, false, err
	}
	s := NBFTSecurity{Index: int(d[1]), Flags: int(flags), SecretType: int(d[4])}
	lists := []struct {
		name string
		at   int
		dst  *[]byte
	}{
		{"secure channel algorithms", 6, &s.SecureChannelAlgorithms},
		{"authentication protocols", 12, &s.AuthProtocols},
		{"cipher suites", 18, &s.CipherSuites},
		{"DH groups", 24, &s.DHGroups},
		{"secure hash functions", 30, &s.HashFunctions},
	}
	for _, l := range lists {
		obj, err := p.heapObj(what+": "+l.name, d, l.at)
		if err != nil {
			return s, false, err
		}
		*l.dst = append([]byte(nil), obj...)
	}
	var err error
	s.KeyPath, err = p.heapString(what+": secret keypath", d, 36)
	return s, err == nil, err
}

func (p *nbftParser) discovery(what string, d []byte) (NBFTDiscovery, bool, error) {
	if d[1]&1 == 0 {
		return NBFTDiscovery{}, false, nil
	}
	if err := checkID(what, d, nbftIDDiscovery); err != nil {
		return NBFTDiscovery{}, false, err
	}
	v := NBFTDiscovery{Index: int(d[2]), HFIIndex: int(d[3]), SecurityIndex: int(d[4])}
	var err error
	if v.URI, err = p.heapString(what+": controller address", d, 6); err != nil {
		return v, false, err
	}
	v.NQN, err = p.heapString(what+": controller NQN", d, 12)
	return v, err == nil, err
}

// transportAddress decodes an SSNS transport address. libnvme reads it
// as a 16-byte IPv6 (or IPv4-mapped) address, which is what the
// specification's "shall be an IP Address" for IP transports means for
// the firmware it was tested with; a firmware writing the address as
// text is accepted too when the text is an IP address.
func transportAddress(what string, obj []byte) (string, error) {
	if len(obj) == 0 {
		return "", nil
	}
	if len(obj) == 16 {
		return ip16(obj), nil
	}
	text := string(obj)
	if i := strings.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	a, err := netip.ParseAddr(strings.TrimSpace(text))
	if err != nil {
		return "", invalid("%s: %d bytes that are neither a 16-byte address nor an IP address as text", what+": transport address", len(obj))
	}
	return a.Unmap().String(), nil
}

func transportName(t byte) string {
	if t == nbftTransportTCP {
		return "tcp"
	}
	return "trtype " + strconv.Itoa(int(t))
}

// formatNID renders a namespace identifier the way the kernel's wwid
// attribute does, so the two can be compared.
func formatNID(typ byte, nid []byte) string {
	switch typ {
	case 1: // EUI-64
		return "eui." + hex.EncodeToString(nid[:8])
	case 2: // NGUID
		return "eui." + hex.EncodeToString(nid[:16])
	case 3: // UUID
		var u [16]byte
		copy(u[:], nid)
		return "uuid." + formatUUID(u)
	}
	return ""
}

// ip16 renders a 16-byte IPv6 or IPv4-mapped address; all zeros is
// "no address" and gives "".
func ip16(b []byte) string {
	a := netip.AddrFrom16([16]byte(b)).Unmap()
	if a.IsUnspecified() {
		return ""
	}
	return a.String()
}

// acpiString trims the NUL or space padding of a fixed ACPI text field.
func acpiString(b []byte) string {
	return strings.TrimRight(strings.ToValidUTF8(string(b), "?"), "\x00 ")
}

func le16(b []byte, at int) uint16 { return binary.LittleEndian.Uint16(b[at:]) }
func le32(b []byte, at int) uint32 { return binary.LittleEndian.Uint32(b[at:]) }

// primaryHost picks the host descriptor that names the host's identity
// when there are several tables: the one marked Selected, else the
// first valid one with an NQN.
func primaryHost(tables []*NBFT) *NBFTHost {
	ordered := append([]*NBFT(nil), tables...)
	sort.SliceStable(ordered, func(i, j int) bool {
		return ordered[i].Host.PrimaryAdmin == PrimaryAdminSelected && ordered[j].Host.PrimaryAdmin != PrimaryAdminSelected
	})
	for _, t := range ordered {
		if t.Valid && t.Host.Valid && t.Host.NQN != "" {
			return &t.Host
		}
	}
	return nil
}

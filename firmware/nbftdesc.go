// Decoders for the NBFT's descriptors (host, HFI, SSNS, security, discovery) and their fields.

package firmware

import (
	"encoding/hex"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

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

package firmware

import (
	"encoding/binary"
	"net/netip"
)

// This file builds NBFT fixtures from the NVM Express Boot
// Specification 1.0 layout, independently of the parser's constants:
// field offsets are written out here as the specification's figures
// give them.

type tHost struct {
	flags byte
	id    [16]byte
	nqn   string
}

type tHFI struct {
	index, flags, trtype byte
	tcp                  *tHFITCP
}

type tHFITCP struct {
	flags       byte
	hfiIndex    uint16
	sbdf        uint32
	mac         [6]byte
	vlan        uint16
	origin      byte
	ip, gateway netip.Addr
	prefix      byte
	routeMetric uint16
	dns1, dns2  netip.Addr
	dhcp        netip.Addr
	hostName    string
}

type tSSNS struct {
	index          uint16
	flags          uint16
	trtype         byte
	trflags        uint16
	discIndex      byte
	traddr         []byte // raw heap object; nil for none
	trsvcid        string
	portID         uint16
	nsid           uint32
	nidt           byte
	nid            [16]byte
	secIndex       byte
	hfiIndex       byte
	secondary      []byte
	nqn            string
	ext            *tSSNSExt
	nulInLength    bool // string lengths count their NUL
	nqnUnavailable bool // leave the NQN out
}

type tSSNSExt struct {
	flags    uint32
	ssns     uint16
	cntlid   uint16
	asqsz    uint16
	rootPath string
}

type tSecurity struct {
	index      byte
	flags      uint16
	secretType byte
	authProtos []byte
	keyPath    string
}

type tDiscovery struct {
	flags, index, hfiIndex, secIndex byte
	uri, nqn                         string
}

type nbftSpec struct {
	controlFlags byte
	minor        byte
	host         tHost
	hfis         []tHFI
	ssns         []tSSNS
	sec          []tSecurity
	disc         []tDiscovery
}

// nbftLayout is where build put things, for tests that corrupt them.
type nbftLayout struct {
	control, host, hfi, ssns, sec, disc, heap int
	// heapObjs maps a name ("host nqn", "ssns0 nqn", "hfi0 trinfo", ...)
	// to the table offset of its 6-byte heap object reference.
	refs map[string]int
}

const (
	specHeaderLen    = 64
	specControlLen   = 64
	specHostLen      = 32
	specHFILen       = 32
	specHFITCPLen    = 128
	specSSNSLen      = 128
	specSSNSExtLen   = 18
	specSecurityLen  = 64
	specDiscoveryLen = 32
)

var le = binary.LittleEndian

// build lays out header, control, host, then the HFI, SSNS, security
// and discovery lists, then the heap, and sets length and checksum.
func (s nbftSpec) build() ([]byte, nbftLayout) {
	l := nbftLayout{refs: map[string]int{}}
	l.control = specHeaderLen
	l.host = l.control + specControlLen
	l.hfi = l.host + specHostLen
	l.ssns = l.hfi + specHFILen*len(s.hfis)
	l.sec = l.ssns + specSSNSLen*len(s.ssns)
	l.disc = l.sec + specSecurityLen*len(s.sec)
	l.heap = l.disc + specDiscoveryLen*len(s.disc)

	b := make([]byte, l.heap)
	heap := []byte{}
	// obj appends data to the heap and writes the reference at ref.
	obj := func(name string, ref int, data []byte, n int) {
		l.refs[name] = ref
		if data == nil {
			return
		}
		le.PutUint32(b[ref:], uint32(l.heap+len(heap)))
		le.PutUint16(b[ref+4:], uint16(n))
		heap = append(heap, data...)
	}
	// objWithString appends data, a heap-resident descriptor, and then
	// s, pointing the reference at data[strAt:] to s.
	objWithString := func(name string, ref int, data []byte, strAt int, s string) {
		if s != "" {
			le.PutUint32(data[strAt:], uint32(l.heap+len(heap)+len(data)))
			le.PutUint16(data[strAt+4:], uint16(len(s)))
		}
		obj(name, ref, data, len(data))
		if s != "" {
			heap = append(heap, append([]byte(s), 0)...)
		}
	}
	str := func(name string, ref int, v string, nulInLength bool) {
		if v == "" {
			l.refs[name] = ref
			return
		}
		n := len(v)
		if nulInLength {
			n++
		}
		obj(name, ref, append([]byte(v), 0), n)
	}

	// Header (figure 8).
	copy(b[0:4], "NBFT")
	b[8] = 1 // major revision
	copy(b[10:16], "VOLMD ")
	copy(b[16:24], "FIXTURE\x00")
	le.PutUint32(b[24:], 1)
	copy(b[28:32], "TEST")
	b[50] = s.minor

	// Control descriptor.
	c := b[l.control:]
	c[0] = 1
	c[1] = 1
	le.PutUint16(c[4:], specControlLen)
	c[6] = s.controlFlags
	le.PutUint32(c[8:], uint32(l.host))
	le.PutUint16(c[12:], specHostLen)
	c[14] = 1
	putList := func(at, off, size, n int) {
		if n == 0 {
			return
		}
		le.PutUint32(c[at:], uint32(off))
		le.PutUint16(c[at+4:], uint16(size))
		c[at+6] = 1
		c[at+7] = byte(n)
	}
	putList(16, l.hfi, specHFILen, len(s.hfis))
	putList(24, l.ssns, specSSNSLen, len(s.ssns))
	putList(32, l.sec, specSecurityLen, len(s.sec))
	putList(40, l.disc, specDiscoveryLen, len(s.disc))

	// Host descriptor (figure 9).
	h := b[l.host:]
	h[0] = 2
	h[1] = s.host.flags
	copy(h[2:18], s.host.id[:])
	str("host nqn", l.host+18, s.host.nqn, false)

	for i, f := range s.hfis {
		at := l.hfi + i*specHFILen
		d := b[at:]
		d[0] = 3
		d[1] = f.index
		d[2] = f.flags
		d[3] = f.trtype
		name := "hfi" + string(rune('0'+i))
		if f.tcp == nil {
			l.refs[name+" trinfo"] = at + 16
			continue
		}
		t := make([]byte, specHFITCPLen)
		t[0] = 7
		t[1] = 1
		t[2] = 3
		t[3] = 1
		le.PutUint16(t[4:], f.tcp.hfiIndex)
		t[6] = f.tcp.flags
		le.PutUint32(t[7:], f.tcp.sbdf)
		copy(t[11:17], f.tcp.mac[:])
		le.PutUint16(t[17:], f.tcp.vlan)
		t[19] = f.tcp.origin
		putIP(t[20:36], f.tcp.ip)
		t[36] = f.tcp.prefix
		putIP(t[37:53], f.tcp.gateway)
		le.PutUint16(t[54:], f.tcp.routeMetric)
		putIP(t[56:72], f.tcp.dns1)
		putIP(t[72:88], f.tcp.dns2)
		putIP(t[88:104], f.tcp.dhcp)
		objWithString(name+" trinfo", at+16, t, 104, f.tcp.hostName)
	}

	for i, n := range s.ssns {
		at := l.ssns + i*specSSNSLen
		d := b[at:]
		d[0] = 4
		le.PutUint16(d[1:], n.index)
		le.PutUint16(d[3:], n.flags)
		d[5] = n.trtype
		le.PutUint16(d[6:], n.trflags)
		d[8] = n.discIndex
		name := "ssns" + string(rune('0'+i))
		obj(name+" traddr", at+10, n.traddr, len(n.traddr))
		str(name+" trsvcid", at+16, n.trsvcid, n.nulInLength)
		le.PutUint16(d[22:], n.portID)
		le.PutUint32(d[24:], n.nsid)
		d[28] = n.nidt
		copy(d[29:45], n.nid[:])
		d[45] = n.secIndex
		d[46] = n.hfiIndex
		obj(name+" secondary", at+48, n.secondary, len(n.secondary))
		if !n.nqnUnavailable {
			str(name+" nqn", at+54, n.nqn, n.nulInLength)
		}
		if n.ext != nil {
			e := make([]byte, specSSNSExtLen)
			e[0] = 9
			e[1] = 1
			le.PutUint16(e[2:], n.ext.ssns)
			le.PutUint32(e[4:], n.ext.flags)
			le.PutUint16(e[8:], n.ext.cntlid)
			le.PutUint16(e[10:], n.ext.asqsz)
			objWithString(name+" ext", at+60, e, 12, n.ext.rootPath)
		}
	}

	for i, sec := range s.sec {
		at := l.sec + i*specSecurityLen
		d := b[at:]
		d[0] = 5
		d[1] = sec.index
		le.PutUint16(d[2:], sec.flags)
		d[4] = sec.secretType
		name := "sec" + string(rune('0'+i))
		obj(name+" auth", at+12, sec.authProtos, len(sec.authProtos))
		str(name+" keypath", at+36, sec.keyPath, false)
	}

	for i, dc := range s.disc {
		at := l.disc + i*specDiscoveryLen
		d := b[at:]
		d[0] = 6
		d[1] = dc.flags
		d[2] = dc.index
		d[3] = dc.hfiIndex
		d[4] = dc.secIndex
		name := "disc" + string(rune('0'+i))
		str(name+" uri", at+6, dc.uri, false)
		str(name+" nqn", at+12, dc.nqn, false)
	}

	b = append(b, heap...)
	le.PutUint32(b[36:], uint32(l.heap))
	le.PutUint32(b[40:], uint32(len(heap)))
	seal(b)
	return b, l
}

// seal sets the header length to len(b) and fixes the checksum, so a
// test's corruption is the only thing wrong with the table.
func seal(b []byte) {
	le.PutUint32(b[4:], uint32(len(b)))
	b[9] = 0
	var sum byte
	for _, c := range b {
		sum += c
	}
	b[9] = -sum
}

// putIP writes a as the table's 16-byte form: IPv6, or IPv4-mapped.
func putIP(dst []byte, a netip.Addr) {
	if !a.IsValid() {
		return
	}
	b := a.As16()
	copy(dst, b[:])
}

func ipBytes(s string) []byte {
	b := make([]byte, 16)
	putIP(b, netip.MustParseAddr(s))
	return b
}

// sampleSpec is a one-path NVMe/TCP boot as a pre-OS driver would
// describe it: one NIC, one namespace, one discovery controller and a
// security profile.
func sampleSpec() nbftSpec {
	return nbftSpec{
		controlFlags: 1,
		host: tHost{
			flags: 1 | 1<<1 | 1<<2 | 2<<3, // valid, ID and NQN configured, primary: selected
			id:    [16]byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01},
			nqn:   "nqn.2014-08.org.nvmexpress:uuid:11223344-5566-7788-99aa-bbccddeeff01",
		},
		hfis: []tHFI{{
			index: 1, flags: 1, trtype: 3,
			tcp: &tHFITCP{
				flags: 1 | 1<<1, hfiIndex: 1, sbdf: 0x0300, mac: [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56},
				ip: netip.MustParseAddr("192.168.49.10"), prefix: 24, gateway: netip.MustParseAddr("192.168.49.1"),
				routeMetric: 500, dns1: netip.MustParseAddr("192.168.49.1"), hostName: "edge-17",
			},
		}},
		ssns: []tSSNS{{
			index: 1, flags: 1 | 1<<2 | 1<<4 | 1<<7, trtype: 3, trflags: 1 | 1<<1,
			discIndex: 1,
			traddr:    ipBytes("192.168.49.5"), trsvcid: "4420", portID: 1,
			nsid: 1, nidt: 3, nid: [16]byte{0xde, 0xad, 0xbe, 0xef, 0, 1, 0x40, 2, 0x80, 3, 4, 5, 6, 7, 8, 9},
			secIndex: 1, hfiIndex: 1,
			nqn: "nqn.2024-01.io.example:boot-root",
			ext: &tSSNSExt{flags: 1 | 1<<1, ssns: 1, cntlid: 7, asqsz: 32, rootPath: "nvme+tcp://192.168.49.5:4420/nqn.2024-01.io.example:boot-root/1"},
		}},
		sec: []tSecurity{{index: 1, flags: 1 | 0x0004 | 0x0008, secretType: 2, authProtos: []byte{1}, keyPath: "https://bmc.example/redfish/v1/keys/1"}},
		disc: []tDiscovery{{
			flags: 1, index: 1, hfiIndex: 1, secIndex: 1,
			uri: "nvme+tcp://192.168.49.5:8009/", nqn: "nqn.2014-08.org.nvmexpress.discovery",
		}},
	}
}

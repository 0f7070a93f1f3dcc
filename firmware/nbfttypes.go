// The parsed NBFT as callers see it, and which host descriptor names the host.

package firmware

import "sort"

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

package nvme

import (
	"fmt"
	"math"
	"strings"
)

// Address is the parsed address attribute of a fabrics controller
// (/sys/class/nvme/nvmeN/address), which the kernel writes as
// "traddr=192.0.2.1,trsvcid=4420" followed, for tcp while a queue is
// live, by ",src_addr=192.0.2.7", and by host_traddr/host_iface when
// those were given. Keys the kernel adds later are ignored.
type Address struct {
	TrAddr, TrSvcID       string
	HostTrAddr, HostIface string
	SrcAddr               string
}

// ParseAddress parses the address attribute of a fabrics controller.
// An empty attribute (the loop transport has no address) gives an
// empty Address.
func ParseAddress(s string) (Address, error) {
	var a Address
	fields, err := parseFields(s)
	if err != nil {
		return a, fmt.Errorf("address %q: %w", s, err)
	}
	for _, f := range fields {
		switch f.key {
		case "traddr":
			a.TrAddr = f.value
		case "trsvcid":
			a.TrSvcID = f.value
		case "host_traddr":
			a.HostTrAddr = f.value
		case "host_iface":
			a.HostIface = f.value
		case "src_addr":
			a.SrcAddr = f.value
		}
	}
	return a, nil
}

// ParseReply parses what /dev/nvme-fabrics answers after a successful
// connect: "instance=N,cntlid=M\n". The controller is /sys/class/nvme/nvmeN.
func ParseReply(s string) (instance, cntlid int, err error) {
	fields, err := parseFields(s)
	if err != nil {
		return 0, 0, fmt.Errorf("nvme-fabrics reply %q: %w", s, err)
	}
	instance, cntlid = -1, -1
	for _, f := range fields {
		switch f.key {
		case "instance":
			instance, err = parseUint(f.value, math.MaxInt32)
		case "cntlid":
			cntlid, err = parseUint(f.value, math.MaxUint16)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("nvme-fabrics reply %q: %s: %w", s, f.key, err)
		}
	}
	if instance < 0 || cntlid < 0 {
		return 0, 0, fmt.Errorf("nvme-fabrics reply %q: want instance=N,cntlid=M", s)
	}
	return instance, cntlid, nil
}

type field struct{ key, value string }

// parseFields splits the kernel's "key=value,key=value\n" lists. Keys
// are lower-case identifiers and appear once; values run to the next
// ',' and hold no control characters.
func parseFields(s string) ([]field, error) {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil, nil
	}
	var out []field
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		if !isKey(k) {
			return nil, fmt.Errorf("%q is not a key", k)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%s: value contains a control character", k)
		}
		for _, f := range out {
			if f.key == k {
				return nil, fmt.Errorf("%s given twice", k)
			}
		}
		out = append(out, field{k, v})
	}
	return out, nil
}

func isKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

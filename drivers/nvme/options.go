package nvme

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/internal/secret"
)

// maxOptions is the most /dev/nvme-fabrics accepts in its one write
// (PAGE_SIZE; larger writes fail with ENOMEM).
const maxOptions = 4096

// maxNSID: 0xffffffff is the broadcast nsid, not a namespace.
const maxNSID = 1<<32 - 2

// Validate checks the options without touching the kernel or the secret
// file. Errors name the field as the manifest spells it.
func (o Options) Validate() error {
	if err := o.Target.Validate(); err != nil {
		return err
	}
	if o.Namespace < 1 || o.Namespace > maxNSID {
		return fmt.Errorf("namespace %d: must be from 1 to %d", o.Namespace, maxNSID)
	}
	if o.HostNQN != "" {
		if err := checkNQN("hostNQN", o.HostNQN); err != nil {
			return err
		}
	}
	if o.HostID != "" && !isUUID(o.HostID) {
		return fmt.Errorf("hostID %q: not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", o.HostID)
	}
	if _, err := seconds("ctrlLossTimeout", o.CtrlLossTmo, true); err != nil {
		return err
	}
	if _, err := seconds("reconnectDelay", o.ReconnectDelay, false); err != nil {
		return err
	}
	if _, err := seconds("keepAliveTimeout", o.KeepAliveTmo, false); err != nil {
		return err
	}
	if o.NrIOQueues < 0 || o.NrIOQueues > math.MaxInt32 {
		return fmt.Errorf("nrIOQueues %d: must not be negative", o.NrIOQueues)
	}
	return nil
}

// Validate checks that t names a reachable kind of target.
func (t Target) Validate() error {
	switch t.Transport {
	case "tcp", "rdma":
	case "":
		return errors.New("transport: missing (tcp or rdma)")
	default:
		return fmt.Errorf("transport %q: not supported (tcp or rdma)", t.Transport)
	}
	if t.Address == "" {
		return errors.New("address: missing")
	}
	// The kernel's tcp and rdma transports take numeric addresses only
	// (inet_pton_with_scope); a name would fail there with EINVAL.
	if _, err := netip.ParseAddr(t.Address); err != nil {
		return fmt.Errorf("address %q: not an IPv4 or IPv6 address (host names are not resolved by the kernel)", t.Address)
	}
	if t.Port < 0 || t.Port > 65535 {
		return fmt.Errorf("port %d: must be from 1 to 65535", t.Port)
	}
	if err := checkNQN("nqn", t.NQN); err != nil {
		return err
	}
	if t.NQN == DiscoveryNQN {
		return fmt.Errorf("nqn %q: is the discovery subsystem, which has no namespaces; name the storage subsystem", t.NQN)
	}
	return nil
}

// checkNQN refuses what the kernel would refuse and anything that could
// change the meaning of the option string: ',' and newlines separate
// options there, '=' separates a key from its value.
func checkNQN(field, v string) error {
	if v == "" {
		return fmt.Errorf("%s: missing", field)
	}
	if len(v) > maxNQN {
		return fmt.Errorf("%s: %d bytes, longer than the %d the kernel accepts", field, len(v), maxNQN)
	}
	return checkValue(field, v)
}

func checkValue(field, v string) error {
	for _, r := range v {
		switch {
		case r == ',' || r == '=':
			return fmt.Errorf("%s %q: contains %q, which would split the option string", field, v, r)
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("%s %q: contains a control character (newline, tab, NUL...)", field, v)
		case r == ' ':
			return fmt.Errorf("%s %q: contains a space", field, v)
		}
	}
	return nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// seconds converts a timeout to the whole seconds the kernel takes; a
// negative value is allowed only where the kernel reads it as "forever".
func seconds(field string, d time.Duration, negativeForever bool) (int, error) {
	switch {
	case d < 0 && negativeForever:
		return -1, nil
	case d < 0:
		return 0, fmt.Errorf("%s %v: must not be negative", field, d)
	case d%time.Second != 0:
		return 0, fmt.Errorf("%s %v: not a whole number of seconds", field, d)
	case d/time.Second > math.MaxInt32:
		return 0, fmt.Errorf("%s %v: too long", field, d)
	}
	return int(d / time.Second), nil
}

// withDefaults fills in our defaults where the caller left a zero.
func (o Options) withDefaults() Options {
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.CtrlLossTmo == 0 {
		o.CtrlLossTmo = DefaultCtrlLossTmo
	}
	if o.ReconnectDelay == 0 {
		o.ReconnectDelay = DefaultReconnectDelay
	}
	return o
}

// optionString renders what is written to /dev/nvme-fabrics. o must have
// passed Validate and withDefaults. The result holds the secret: it goes
// to the kernel and nowhere else.
func (o Options) optionString(key secret.Value) (string, error) {
	ctrlLoss, _ := seconds("ctrlLossTimeout", o.CtrlLossTmo, true)
	reconnect, _ := seconds("reconnectDelay", o.ReconnectDelay, false)
	kato, _ := seconds("keepAliveTimeout", o.KeepAliveTmo, false)

	var b strings.Builder
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	add("nqn", o.NQN)
	add("transport", o.Transport)
	add("traddr", o.addr())
	add("trsvcid", strconv.Itoa(o.port()))
	if o.HostNQN != "" {
		add("hostnqn", o.HostNQN)
	}
	if o.HostID != "" {
		add("hostid", strings.ToLower(o.HostID))
	}
	add("ctrl_loss_tmo", strconv.Itoa(ctrlLoss))
	add("reconnect_delay", strconv.Itoa(reconnect))
	if kato > 0 {
		add("keep_alive_tmo", strconv.Itoa(kato))
	}
	if o.NrIOQueues > 0 {
		add("nr_io_queues", strconv.Itoa(o.NrIOQueues))
	}
	if !key.Empty() {
		if err := checkDHCHAPKey(key.Reveal()); err != nil {
			return "", fmt.Errorf("dhchapSecretFile %s: %w", o.DHCHAPSecretFile, err)
		}
		add("dhchap_secret", key.Reveal())
	}
	if b.Len() >= maxOptions {
		return "", fmt.Errorf("option string of %d bytes is longer than the kernel accepts (%d)", b.Len(), maxOptions-1)
	}
	return b.String(), nil
}

// checkDHCHAPKey checks the NVMe key format "DHHC-1:HH:<base64>:" the
// way the kernel will (nvme_auth_extract_key), so that a damaged key
// file is reported by name here rather than as EINVAL from the kernel.
// Unlike every other value, the key may contain '=': it is base64
// padding, and harmless, because the kernel splits options only at ','
// and newlines and takes the value after the first '='. Errors never
// quote the key.
func checkDHCHAPKey(k string) error {
	const bad = `not a DH-HMAC-CHAP key of the form "DHHC-1:NN:<base64>:" (as nvme gen-dhchap-key writes)`
	rest, ok := strings.CutPrefix(k, "DHHC-1:")
	if !ok || len(rest) < 4 || rest[2] != ':' || !strings.HasSuffix(rest, ":") {
		return errors.New(bad)
	}
	if h := rest[:2]; h != "00" && h != "01" && h != "02" && h != "03" {
		return errors.New(bad + ": unknown hash indicator")
	}
	b64 := rest[3 : len(rest)-1]
	for i := 0; i < len(b64); i++ {
		c := b64[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=') {
			return errors.New(bad + ": the key is not base64")
		}
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return errors.New(bad + ": the key is not base64")
	}
	if n := len(raw) - 4; n != 32 && n != 48 && n != 64 {
		return fmt.Errorf("%s: the key is %d bytes, not 32, 48 or 64", bad, max(n, 0))
	}
	key, sum := raw[:len(raw)-4], binary.LittleEndian.Uint32(raw[len(raw)-4:])
	if crc32.ChecksumIEEE(key) != sum {
		return errors.New("DH-HMAC-CHAP key: checksum mismatch (the key was damaged or mistyped)")
	}
	return nil
}

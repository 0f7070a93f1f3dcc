package device

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/volumed/volumed/internal/sysfs"
)

// ids are the identifiers sysfs gives one disk.
type ids struct {
	serial string
	wwns   []wwn // best first
}

// readIDs collects a disk's serial and WWNs from where each driver puts
// them:
//
//	serial: <disk>/serial (virtio), <disk>/device/serial (NVMe controller
//	        or subsystem), <disk>/device/vpd_pg80 (SCSI, ATA behind libata)
//	wwn:    <disk>/wwid (NVMe namespace), <disk>/device/wwid (SCSI, from
//	        page 0x83), <disk>/device/vpd_pg83 (every LU designator)
//
// A source that is absent is skipped; one that cannot be read or parsed
// is an error.
func readIDs(dir string) (ids, error) {
	var out ids
	for _, src := range []string{"serial", "device/serial", "device/vpd_pg80"} {
		b, err := readOptional(dir, src)
		if err != nil {
			return ids{}, err
		}
		if b == nil {
			continue
		}
		s := trimID(string(b))
		if src == "device/vpd_pg80" {
			if s, err = parseVPD80(b); err != nil {
				return ids{}, fmt.Errorf("%s: %w", src, err)
			}
		}
		if s != "" {
			out.serial = s
			break
		}
	}
	for _, src := range []string{"wwid", "device/wwid"} {
		b, err := readOptional(dir, src)
		if errors.Is(err, syscall.EINVAL) && src == "device/wwid" {
			// The SCSI wwid attribute exists on every disk but fails
			// with EINVAL when page 0x83 has no designator it takes (a
			// qemu scsi-hd without wwn=): no WWN here, and the serial
			// and page 0x83 still count.
			continue
		}
		if err != nil {
			return ids{}, err
		}
		if w := parseWWN(string(b)); w.id != "" {
			out.addWWN(w)
		}
	}
	b, err := readOptional(dir, "device/vpd_pg83")
	if err != nil {
		return ids{}, err
	}
	if b != nil {
		ws, err := parseVPD83(b)
		if err != nil {
			return ids{}, fmt.Errorf("device/vpd_pg83: %w", err)
		}
		for _, w := range ws {
			out.addWWN(w)
		}
	}
	return out, nil
}

// readOptional reads dir/rel; nil, nil when it does not exist.
func readOptional(dir, rel string) ([]byte, error) {
	b, err := sysfs.Bytes(dir, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

func (x *ids) addWWN(w wwn) {
	for _, have := range x.wwns {
		if have == w {
			return
		}
	}
	x.wwns = append(x.wwns, w)
}

func (x ids) selectedBy(s Selector) bool {
	switch {
	case s.Serial != "":
		return x.serial != "" && normSerial(x.serial) == normSerial(s.Serial)
	case s.WWN != "":
		want := parseWWN(s.WWN)
		for _, w := range x.wwns {
			if w.matches(want) {
				return true
			}
		}
	}
	return false
}

func (x ids) fill(d *Disk) {
	d.Serial = x.serial
	if len(x.wwns) > 0 {
		d.WWN = x.wwns[0].String()
	}
}

// trimID strips the padding drivers leave around identifiers: the
// trailing newline, space padding (NVMe, SCSI) and NULs (virtio).
func trimID(s string) string { return strings.Trim(s, " \t\r\n\x00") }

// normSerial is the form serials are compared in: padding dropped and
// each run of inner blanks made one '_', as udev's ID_SERIAL_SHORT (and
// so /dev/disk/by-id) spells them.
func normSerial(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\x00", " ")), "_")
}

// wwn is a world wide name split into its designator kind ("naa", "eui",
// "t10", "nvme", "uuid", …) and the rest, both lower case. kind is ""
// when the name was given as bare hex.
type wwn struct{ kind, id string }

func parseWWN(s string) wwn {
	s = lowerASCII(trimID(s))
	if rest, ok := strings.CutPrefix(s, "0x"); ok {
		return wwn{id: rest}
	}
	kind, id, ok := strings.Cut(s, ".")
	if !ok || kind == "" {
		return wwn{id: s}
	}
	if kind == "nguid" {
		// The kernel prints a namespace's NGUID as "eui." plus 32 hex
		// digits in wwid, and as a UUID in the nguid attribute.
		kind, id = "eui", strings.ReplaceAll(id, "-", "")
	}
	return wwn{kind: kind, id: id}
}

// lowerASCII folds only ASCII letters: identifiers are ASCII, and
// Unicode case mapping neither round-trips nor keeps invalid UTF-8.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// String spells a bare name with "0x", so that it parses back the same.
func (w wwn) String() string {
	if w.kind == "" {
		return "0x" + w.id
	}
	return w.kind + "." + w.id
}

// matches compares two names; a bare one matches any kind with the same
// digits, as lsblk's "0x5000…" does the kernel's "naa.5000…".
func (w wwn) matches(o wwn) bool {
	return w.id == o.id && (w.kind == "" || o.kind == "" || w.kind == o.kind)
}

// Identifiers returns the serial and the best WWN sysfs gives the whole
// disk at dir (a /sys/block entry), "" for what it has none of.
func Identifiers(dir string) (serial, wwn string, err error) {
	x, err := readIDs(dir)
	if err != nil {
		return "", "", err
	}
	var d Disk
	x.fill(&d)
	return d.Serial, d.WWN, nil
}

// Keys are the identities the block device at dir (its /sys/class/block
// entry) answers to, in Identity's form: its node under /dev (and
// /dev/mapper for a device-mapper device), and for a whole disk its
// serial and every WWN, also bare. SelectorKeys gives a selector's.
func Keys(dir string) ([]string, error) {
	out := []string{Identity(Selector{Path: "/dev/" + NodeName(dir)})}
	if m := sysfs.AttrOr(dir, "dm", "name"); m != "" {
		out = append(out, Identity(Selector{Path: "/dev/mapper/" + m}))
	}
	if sysfs.IsPartition(dir) {
		return out, nil // selected by path alone
	}
	x, err := readIDs(dir)
	if err != nil {
		return out, err
	}
	if x.serial != "" {
		out = append(out, Identity(Selector{Serial: x.serial}))
	}
	for _, w := range x.wwns {
		out = append(out, "device:wwn:"+w.String())
		if w.kind != "" {
			out = append(out, "device:wwn:"+wwn{id: w.id}.String())
		}
	}
	return out, nil
}

// NodeName is the name under /dev the kernel gives the block device
// whose sysfs directory is dir.
func NodeName(dir string) string { return devName(dir, filepath.Base(dir)) }

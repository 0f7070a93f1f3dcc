package luks

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/volumed/volumed/internal/sysfs"
)

// Mapping is a device-mapper device as sysfs shows it.
type Mapping struct {
	Name   string   // /sys/block/dm-N/dm/name
	UUID   string   // /sys/block/dm-N/dm/uuid; cryptsetup's is CRYPT-LUKS2-<uuid without dashes>-<name>
	Node   string   // "dm-N"
	Dev    string   // "major:minor" of the mapping
	Slaves []string // "major:minor" of the devices under it
}

// Crypt reports a mapping cryptsetup made for a LUKS2 volume.
func (m Mapping) Crypt() bool { return strings.HasPrefix(m.UUID, "CRYPT-LUKS2-") }

// LUKSUUID is the LUKS2 UUID of a crypt mapping in its dashed form, or ""
// when the DM uuid is not cryptsetup's LUKS2 form for this mapping's name.
func (m Mapping) LUKSUUID() string {
	rest, ok := strings.CutPrefix(m.UUID, "CRYPT-LUKS2-")
	if !ok {
		return ""
	}
	hex, ok := strings.CutSuffix(rest, "-"+m.Name)
	if !ok || len(hex) != 32 || strings.Trim(hex, "0123456789abcdefABCDEF") != "" {
		return ""
	}
	return hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:]
}

func (c *Client) sys() string { return sysfs.RootOr(c.SysRoot) }

// Mappings lists every device-mapper device, for reconstruction after a
// restart: a crypt mapping named like a volume's is adopted, not reopened.
func (c *Client) Mappings() ([]Mapping, error) {
	nodes, err := filepath.Glob(filepath.Join(c.sys(), "block", "dm-*"))
	if err != nil {
		return nil, err
	}
	var out []Mapping
	for _, n := range nodes {
		m, err := readMapping(n)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while we looked
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Mapping finds the device-mapper device called name.
func (c *Client) Mapping(name string) (Mapping, bool, error) {
	ms, err := c.Mappings()
	if err != nil {
		return Mapping{}, false, err
	}
	for _, m := range ms {
		if m.Name == name {
			return m, true, nil
		}
	}
	return Mapping{}, false, nil
}

func readMapping(dir string) (Mapping, error) {
	m := Mapping{Node: filepath.Base(dir)}
	var err error
	if m.Name, err = sysfs.Attr(filepath.Join(dir, "dm", "name")); err != nil {
		return m, err
	}
	if m.UUID, err = sysfs.Attr(filepath.Join(dir, "dm", "uuid")); err != nil {
		return m, err
	}
	if m.Dev, err = sysfs.Attr(filepath.Join(dir, "dev")); err != nil {
		return m, err
	}
	slaves, err := os.ReadDir(filepath.Join(dir, "slaves"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, err
	}
	for _, s := range slaves {
		dev, err := sysfs.Attr(filepath.Join(dir, "slaves", s.Name(), "dev"))
		if err != nil {
			return m, fmt.Errorf("%s: slave %s: %w", m.Node, s.Name(), err)
		}
		m.Slaves = append(m.Slaves, dev)
	}
	return m, nil
}

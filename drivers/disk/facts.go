// Package disk lists the host's whole disks with the facts a disk
// selector sees (sysfs, the identifiers drivers/device reads from the
// VPD pages, and a look at the disk's first and last sectors), and picks
// one with a CEL expression over them.
//
// A disk is an entry of /sys/block that can hold a volume: RAM disks,
// zram, optical drives, floppies, md arrays, device-mapper devices other
// than multipath maps, the per-path nodes of NVMe native multipath
// (hidden) and of dm-multipath (held by a map), and empty devices (an
// unbound loop device, a reader without a card) are left out.
package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/drivers/device"
	"github.com/volumed/volumed/drivers/gpt"
	"github.com/volumed/volumed/internal/blank"
	"github.com/volumed/volumed/internal/sysfs"
)

// Facts are what a selector sees of one whole disk. The json names are
// the names in CEL expressions: disk.size, disk.transport, ...
type Facts struct {
	Name       string `json:"name"` // kernel name, e.g. sda
	Path       string `json:"path"` // node, e.g. /dev/sda
	Size       int64  `json:"size"` // bytes
	Model      string `json:"model"`
	Vendor     string `json:"vendor"`
	Serial     string `json:"serial"`
	WWN        string `json:"wwn"`
	Transport  string `json:"transport"` // nvme, sata, scsi, iscsi, virtio, usb, mmc, loop, nvme-tcp, ..., "" when unknown
	Rotational bool   `json:"rotational"`
	Removable  bool   `json:"removable"`
	ReadOnly   bool   `json:"readOnly"`
	Blank      bool   `json:"blank"` // blank by the blank rule (internal/blank), and the look succeeded
	// NotBlank is the blank rule's reason when the disk is not blank
	// (Signature, KernelPartitions, Held, UnknownData, NotRead).
	NotBlank   string      `json:"notBlank"`
	Signatures []string    `json:"signatures"` // what the look found: "gpt", "ext4", "dos", ...
	Partitions []Partition `json:"partitions"`
	// ProbeError says why the disk's sectors (or its VPD identifiers)
	// could not be read; a disk whose sectors could not be read is never
	// blank.
	ProbeError string `json:"probeError"`
}

// Partition is one partition the kernel has on the disk, with what the
// disk's GPT says of it.
type Partition struct {
	Number int    `json:"number"`
	Name   string `json:"name"` // kernel name, e.g. sda1
	Path   string `json:"path"`
	Start  int64  `json:"start"` // bytes
	Size   int64  `json:"size"`
	Label  string `json:"label"` // GPT partition name, "" when none
	Type   string `json:"type"`  // GPT type GUID, upper case
	UUID   string `json:"uuid"`  // GPT partition GUID, upper case
}

// Look is what reading a disk's sectors found.
type Look struct {
	Signatures []blockfs.Signature
	Table      *gpt.Table // nil when the disk has no (valid) GPT
	// Zeros is the blank rule's read of the disk, made when no
	// signature was found.
	Zeros blank.Zeros
}

// Lister lists disks from a sysfs and a /dev tree. The zero value uses
// /sys, /dev and LookAt; tests point it at fixture trees and a fake look.
type Lister struct {
	SysRoot string
	DevRoot string
	Look    func(ctx context.Context, path string, size int64, sectorSize int) (Look, error)
}

func (l Lister) sys(elem ...string) string {
	return filepath.Join(append([]string{sysfs.RootOr(l.SysRoot)}, elem...)...)
}

func (l Lister) dev(name string) string {
	root := l.DevRoot
	if root == "" {
		root = "/dev"
	}
	return filepath.Join(root, name)
}

// List returns every disk, in path order (see Less). A disk that
// vanishes while being read is left out; one whose sysfs entry cannot be
// read is an error.
func (l Lister) List(ctx context.Context) ([]Facts, error) {
	ents, err := os.ReadDir(l.sys("block"))
	if err != nil {
		return nil, err
	}
	var out []Facts
	for _, e := range ents {
		f, ok, err := l.read(ctx, e.Name())
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", e.Name(), err)
		}
		if ok {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b Facts) int { return Compare(a.Path, b.Path) })
	return out, nil
}

func (l Lister) read(ctx context.Context, name string) (Facts, bool, error) {
	dir := l.sys("block", name)
	if skipName(name) || sysfs.AttrOr(dir, "hidden") == "1" {
		return Facts{}, false, nil
	}
	if uuid := sysfs.AttrOr(dir, "dm", "uuid"); fileExists(filepath.Join(dir, "dm")) && !strings.HasPrefix(uuid, "mpath-") {
		return Facts{}, false, nil
	}
	if l.multipathMember(dir) {
		return Facts{}, false, nil
	}
	size, err := sysfs.Size(dir)
	if err != nil {
		return Facts{}, false, err
	}
	if size == 0 {
		return Facts{}, false, nil
	}
	f := Facts{
		Name: name, Path: l.dev(device.NodeName(dir)), Size: size,
		Model: sysfs.AttrOr(dir, "device", "model"), Vendor: sysfs.AttrOr(dir, "device", "vendor"),
		Rotational: sysfs.AttrOr(dir, "queue", "rotational") == "1",
		Removable:  sysfs.AttrOr(dir, "removable") == "1",
		ReadOnly:   sysfs.AttrOr(dir, "ro") == "1",
		Transport:  l.transport(dir, name),
		Signatures: []string{}, Partitions: []Partition{},
	}
	// A disk whose VPD pages do not parse is still listed (without
	// identifiers, and saying why): one odd disk must not hide the others.
	var idErr error
	if f.Serial, f.WWN, idErr = device.Identifiers(dir); idErr != nil {
		if errors.Is(idErr, fs.ErrNotExist) || errors.Is(idErr, unix.ENODEV) {
			return Facts{}, false, idErr
		}
		idErr = fmt.Errorf("identifiers: %w", idErr)
	}
	if f.Partitions, err = l.partitions(dir); err != nil {
		return Facts{}, false, err
	}
	ss, err := strconv.Atoi(sysfs.AttrOr(dir, "queue", "logical_block_size"))
	if err != nil {
		ss = 512
	}
	look := l.Look
	if look == nil {
		look = LookAt
	}
	lk, err := look(ctx, f.Path, f.Size, ss)
	if err != nil || idErr != nil {
		f.ProbeError = errors.Join(idErr, err).Error()
	}
	if err != nil {
		return f, true, nil
	}
	_, holders, err := blockfs.SysfsUsers(dir)
	if err != nil {
		return Facts{}, false, err
	}
	v := blank.Decide(l.blankFacts(f, lk, holders))
	f.Blank, f.NotBlank = v.Blank, v.Reason
	for _, s := range lk.Signatures {
		if !slices.Contains(f.Signatures, s.Type) {
			f.Signatures = append(f.Signatures, s.Type)
		}
	}
	if lk.Table != nil {
		for i, p := range f.Partitions {
			for _, e := range lk.Table.Entries {
				if e.Index == p.Number && int64(e.FirstLBA)*int64(lk.Table.SectorSize) == p.Start {
					f.Partitions[i].Label, f.Partitions[i].Type, f.Partitions[i].UUID = e.Name, e.Type, e.GUID
				}
			}
		}
	}
	return f, true, nil
}

// blankFacts are the blank rule's facts of the disk.
func (l Lister) blankFacts(f Facts, lk Look, holders []string) blank.Facts {
	bf := blank.Facts{Device: f.Path, Holders: holders, Zeros: lk.Zeros}
	for _, s := range lk.Signatures {
		bf.Signatures = append(bf.Signatures, blank.Signature(s))
	}
	for _, p := range f.Partitions {
		bf.Partitions = append(bf.Partitions, p.Name)
	}
	return bf
}

// skipName leaves out kinds of block device that are never a volume's disk.
func skipName(name string) bool {
	for _, p := range []string{"ram", "zram", "sr", "fd", "md", "nbd"} {
		if strings.HasPrefix(name, p) && len(name) > len(p) && name[len(p)] >= '0' && name[len(p)] <= '9' {
			return true
		}
	}
	return false
}

// multipathMember: a path of a dm-multipath map; the map is the disk.
func (l Lister) multipathMember(dir string) bool {
	hs, _ := sysfs.Holders(dir)
	for _, h := range hs {
		if strings.HasPrefix(sysfs.AttrOr(l.sys("block", h), "dm", "uuid"), "mpath-") {
			return true
		}
	}
	return false
}

// transport names the bus the disk hangs off, from where sysfs puts it.
func (l Lister) transport(dir, name string) string {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = dir
	}
	p := filepath.ToSlash(real)
	has := func(s string) bool { return strings.Contains(p, s) }
	switch {
	case strings.HasPrefix(name, "loop"):
		return "loop"
	case has("/usb"):
		return "usb"
	case has("/session"):
		return "iscsi"
	case has("/ata"):
		return "sata"
	case has("/target"):
		return "scsi" // SAS, FC, virtio-scsi, ...
	case has("/mmc"):
		return "mmc"
	case has("/virtio"):
		return "virtio"
	case strings.HasPrefix(name, "nvme") || has("/nvme"):
		t := sysfs.AttrOr(dir, "device", "transport")
		if t == "" {
			// Native multipath: device is the subsystem, which links
			// its controllers; they share one transport.
			ctrls, _ := filepath.Glob(filepath.Join(dir, "device", "nvme[0-9]*", "transport"))
			if len(ctrls) > 0 {
				t = sysfs.AttrOr(filepath.Dir(ctrls[0]), "transport")
			}
		}
		switch t {
		case "", "pcie":
			return "nvme"
		default:
			return "nvme-" + t
		}
	}
	return ""
}

func (l Lister) partitions(dir string) ([]Partition, error) {
	ps, err := device.Partitions(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Partition, len(ps))
	for i, p := range ps {
		out[i] = Partition{Number: p.Number, Name: p.Name, Path: l.dev(p.Node), Start: p.Start, Size: p.Size}
	}
	return out, nil
}

// LookAt reads the disk at path: every signature on it (blockfs, with
// blkid's second opinion when the Go probe finds none) and its GPT.
func LookAt(ctx context.Context, path string, size int64, sectorSize int) (Look, error) {
	sigs, err := blockfs.ProbeDeviceWith(ctx, path, blockfs.ProbeOptions{BlkidOnlyIfBlank: true})
	if err != nil {
		return Look{}, err
	}
	lk := Look{Signatures: sigs}
	if len(sigs) == 0 {
		if lk.Zeros, err = blockfs.ReadZerosAt(path); err != nil {
			return Look{}, err
		}
		return lk, nil
	}
	// The probe looks for a GPT header wherever gpt.Read does: with none
	// found there is no table to read, and the disk is not opened again.
	if !slices.ContainsFunc(sigs, func(s blockfs.Signature) bool { return s.Type == "gpt" }) {
		return lk, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return Look{}, err
	}
	defer f.Close()
	t, err := gpt.Read(f, size, sectorSize)
	if err == nil {
		lk.Table = t
	}
	return lk, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Compare orders device paths as a person would: digit runs by value, so
// /dev/nvme2n1 comes before /dev/nvme10n1.
func Compare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// Selector names the disk by its most stable identifier, for a record
// that must find the same disk after a reboot renames /dev/sdX: its WWN,
// else its serial, else (a disk with neither, like a loop device) its
// path.
func (f Facts) Selector() device.Selector {
	switch {
	case f.WWN != "":
		return device.Selector{WWN: f.WWN}
	case f.Serial != "":
		return device.Selector{Serial: f.Serial}
	}
	return device.Selector{Path: f.Path}
}

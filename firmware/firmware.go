// Package firmware reads what the boot firmware tells the OS about
// network boot volumes, the iSCSI Boot Firmware Table (iBFT, from the
// kernel's /sys/firmware/ibft) and the NVMe-oF Boot Firmware Table
// (NBFT, the raw ACPI table under /sys/firmware/acpi/tables), and works
// out the host's storage identity (iSCSI initiator name, NVMe host NQN
// and host ID).
//
// The volumes the host booted from are pinned: the agent must never log
// out of, disconnect from, unmount or detach them, whatever a manifest
// says. Pinning is by target, not by LUN or namespace: a manifest may
// use another LUN of the boot target, and logging its session out would
// still take the root filesystem with it.
//
// Every reader takes a root directory ("" or "/" for the running
// system) so tests and tools can point it at a copy of sysfs and /etc.
package firmware

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	defaultISCSIPort = 3260
	defaultNVMePort  = 4420
)

// BootVolume is one volume the firmware booted (or was set up to boot)
// from.
type BootVolume struct {
	Driver string // "iscsi" or "nvme"
	Source string // "ibft target0", "NBFT SSNS 1" (table file name and SSNS index)

	// iSCSI
	Portal    string // host:port, IPv6 in brackets
	IQN       string // target name
	LUN       int    // -1 when the iBFT's LUN cannot be decoded
	Initiator string // initiator name the firmware logged in with

	// NVMe-oF
	Transport string // "tcp"
	Address   string
	Port      int
	NQN       string // subsystem NQN
	NSID      int    // 0 when the firmware identifies the namespace by NID only
	NID       string // "uuid.…" or "eui.…", as /sys/block/nvmeXnY/wwid shows it
	HostNQN   string // host NQN the firmware connected with
	HostID    string

	// NIC the firmware used: the kernel interface name when it could be
	// found, and the MAC the table gives.
	NIC string
	MAC string
}

// BootVolumes lists the volumes in root's iBFT and NBFTs. When a table
// cannot be read, the error says so and the volumes of the tables that
// could be read are still returned: a caller should then treat the
// picture as incomplete (and, say, log out of nothing it did not
// create) rather than as "no boot volumes". NBFT namespaces marked
// non-bootable or unavailable are listed too: the OS may still need
// them, and pinning one volume too many costs nothing.
func BootVolumes(root string) ([]BootVolume, error) {
	var vols []BootVolume
	var errs []error
	ibft, err := ReadIBFT(root)
	if err != nil {
		errs = append(errs, err)
	}
	if ibft != nil {
		vols = append(vols, ibft.volumes()...)
	}
	tables, err := ReadNBFT(root)
	if err != nil {
		errs = append(errs, err)
	}
	for _, t := range tables {
		vols = append(vols, t.volumes(root)...)
	}
	return vols, errors.Join(errs...)
}

func (t *IBFT) volumes() []BootVolume {
	var vols []BootVolume
	for _, tgt := range t.Targets {
		port := tgt.Port
		if port == 0 {
			port = defaultISCSIPort
		}
		v := BootVolume{
			Driver:    "iscsi",
			Source:    "ibft " + tgt.Name,
			Portal:    net.JoinHostPort(tgt.IP, strconv.Itoa(port)),
			IQN:       tgt.IQN,
			LUN:       tgt.LUN,
			Initiator: t.Initiator,
		}
		for _, n := range t.NICs {
			if n.Index == tgt.NICIndex {
				v.NIC, v.MAC = n.Interface, n.MAC
				break
			}
		}
		vols = append(vols, v)
	}
	return vols
}

func (t *NBFT) volumes(root string) []BootVolume {
	name := "NBFT"
	if t.Source != "" {
		name = filepath.Base(t.Source)
	}
	var hostID string
	if t.Host.ID != ([16]byte{}) {
		hostID = formatUUID(t.Host.ID)
	}
	var vols []BootVolume
	for _, s := range t.Subsystems {
		port, err := strconv.Atoi(s.TrSvcID)
		if err != nil || port <= 0 || port > 65535 {
			port = 0
			if s.TrSvcID == "" {
				port = defaultNVMePort
			}
		}
		v := BootVolume{
			Driver:    "nvme",
			Source:    fmt.Sprintf("%s SSNS %d", name, s.Index),
			LUN:       -1,
			Transport: s.Transport,
			Address:   s.Address,
			Port:      port,
			NQN:       s.NQN,
			NSID:      s.NSID,
			NID:       s.NID,
			HostNQN:   t.Host.NQN,
			HostID:    hostID,
		}
		for _, h := range t.HFIs {
			if h.Index == s.HFIIndex && h.TCP != nil {
				v.MAC = h.TCP.MAC
				v.NIC = ifaceByMAC(root, v.MAC)
				break
			}
		}
		vols = append(vols, v)
	}
	return vols
}

// PinnedISCSI reports whether iqn is the target of a boot volume.
// Sessions to it must never be logged out, on any portal: other LUNs and
// other paths of the boot target share its fate. iSCSI names compare
// case-insensitively.
func PinnedISCSI(vols []BootVolume, iqn string) bool {
	for _, v := range vols {
		if v.Driver == "iscsi" && iqn != "" && strings.EqualFold(v.IQN, iqn) {
			return true
		}
	}
	return false
}

// PinnedNVMe reports whether nqn is the subsystem of a boot volume.
// Controllers to it must never be deleted, on any path.
func PinnedNVMe(vols []BootVolume, nqn string) bool {
	for _, v := range vols {
		if v.Driver == "nvme" && nqn != "" && v.NQN == nqn {
			return true
		}
	}
	return false
}

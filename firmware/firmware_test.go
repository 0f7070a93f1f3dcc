package firmware

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBootVolumes(t *testing.T) {
	root := ibftFixture(t)
	b, _ := sampleSpec().build()
	writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT"), b)
	writeTree(t, root, map[string]string{"sys/class/net/eno1/address": "52:54:00:12:34:56\n"})

	got, err := BootVolumes(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []BootVolume{
		{
			Driver: "iscsi", Source: "ibft target0", Portal: "192.168.40.5:3260",
			IQN: "iqn.2003-01.org.linux-iscsi.san:boot", LUN: 1, Initiator: "iqn.2010-04.org.ipxe:edge-17",
			NIC: "enp3s0", MAC: "52:54:00:aa:bb:01",
		},
		{
			Driver: "iscsi", Source: "ibft target1", Portal: "[fd00:40::5]:3261",
			IQN: "iqn.2003-01.org.linux-iscsi.san:boot", LUN: 256, Initiator: "iqn.2010-04.org.ipxe:edge-17",
			NIC: "enp4s0", MAC: "52:54:00:aa:bb:02",
		},
		{
			Driver: "nvme", Source: "NBFT SSNS 1", LUN: -1, Transport: "tcp", Address: "192.168.49.5", Port: 4420,
			NQN: "nqn.2024-01.io.example:boot-root", NSID: 1, NID: "uuid.deadbeef-0001-4002-8003-040506070809",
			HostNQN: "nqn.2014-08.org.nvmexpress:uuid:11223344-5566-7788-99aa-bbccddeeff01",
			HostID:  "11223344-5566-7788-99aa-bbccddeeff01",
			NIC:     "eno1", MAC: "52:54:00:12:34:56",
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BootVolumes:\n got %+v\nwant %+v", got, want)
	}

	for _, c := range []struct {
		iqn  string
		want bool
	}{
		{"iqn.2003-01.org.linux-iscsi.san:boot", true},
		{"IQN.2003-01.ORG.LINUX-ISCSI.SAN:BOOT", true},
		{"iqn.2003-01.org.linux-iscsi.san:data", false},
		{"", false},
	} {
		if p := PinnedISCSI(got, c.iqn); p != c.want {
			t.Errorf("PinnedISCSI(%q) = %v, want %v", c.iqn, p, c.want)
		}
	}
	for _, c := range []struct {
		nqn  string
		want bool
	}{
		{"nqn.2024-01.io.example:boot-root", true},
		{"nqn.2024-01.io.example:data", false},
		{"iqn.2003-01.org.linux-iscsi.san:boot", false}, // an iSCSI target is not an NVMe subsystem
		{"", false},
	} {
		if p := PinnedNVMe(got, c.nqn); p != c.want {
			t.Errorf("PinnedNVMe(%q) = %v, want %v", c.nqn, p, c.want)
		}
	}
}

// TestBootVolumesPartial: a broken table is reported, and what the other
// tables say is still returned, so the caller can keep pinning it.
func TestBootVolumesPartial(t *testing.T) {
	root := ibftFixture(t)
	good, _ := sampleSpec().build()
	bad := bytes.Clone(good)
	le.PutUint32(bad[specHeaderLen+8:], 0xffff0000) // host descriptor offset
	seal(bad)
	writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT1"), bad)
	writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT2"), good)

	got, err := BootVolumes(root)
	if err == nil || !strings.Contains(err.Error(), "NBFT1") || !strings.Contains(err.Error(), "host descriptor") {
		t.Errorf("error %v does not name NBFT1's host descriptor", err)
	}
	var sources []string
	for _, v := range got {
		sources = append(sources, v.Source)
	}
	if want := []string{"ibft target0", "ibft target1", "NBFT2 SSNS 1"}; !reflect.DeepEqual(sources, want) {
		t.Errorf("volumes from %v, want %v", sources, want)
	}
}

func TestBootVolumesNone(t *testing.T) {
	got, err := BootVolumes(t.TempDir())
	if err != nil || len(got) != 0 {
		t.Errorf("host without boot tables: %v, %v", got, err)
	}
}

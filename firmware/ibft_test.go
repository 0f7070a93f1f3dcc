package firmware

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeTree writes a fixture tree: path (relative to root) -> content.
// Sysfs attributes end in a newline, as the kernel prints them.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		writeFile(t, filepath.Join(root, p), []byte(content))
	}
}

func mkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

const chapSecret = "s3cr3t-never-shown"

// ibftFixture is what the kernel's iscsi_ibft shows for a two-target
// (two-path) boot, in the formats iscsi_ibft.c prints: IPv6 written out
// in full, the LUN byte by byte with %x.
func ibftFixture(t *testing.T) string {
	root := t.TempDir()
	const d = "sys/firmware/ibft/"
	writeTree(t, root, map[string]string{
		d + "acpi_header/signature":        "iBFT\n",
		d + "initiator/index":              "0\n",
		d + "initiator/flags":              "3\n",
		d + "initiator/initiator-name":     "iqn.2010-04.org.ipxe:edge-17\n",
		d + "ethernet0/index":              "0\n",
		d + "ethernet0/flags":              "3\n",
		d + "ethernet0/ip-addr":            "192.168.40.17\n",
		d + "ethernet0/prefix-len":         "24\n",
		d + "ethernet0/subnet-mask":        "255.255.255.0",
		d + "ethernet0/origin":             "3\n",
		d + "ethernet0/gateway":            "192.168.40.1\n",
		d + "ethernet0/dhcp":               "192.168.40.1\n",
		d + "ethernet0/vlan":               "0\n",
		d + "ethernet0/mac":                "52:54:00:aa:bb:01\n",
		d + "ethernet0/hostname":           "edge-17\n",
		d + "ethernet1/index":              "1\n",
		d + "ethernet1/flags":              "1\n",
		d + "ethernet1/ip-addr":            "fd00:0040:0000:0000:0000:0000:0000:0017\n",
		d + "ethernet1/prefix-len":         "64\n",
		d + "ethernet1/origin":             "0\n",
		d + "ethernet1/vlan":               "40\n",
		d + "ethernet1/mac":                "52:54:00:AA:BB:02\n",
		d + "target0/index":                "0\n",
		d + "target0/flags":                "3\n",
		d + "target0/ip-addr":              "192.168.40.5\n",
		d + "target0/port":                 "3260\n",
		d + "target0/lun":                  "01000000\n",
		d + "target0/nic-assoc":            "0\n",
		d + "target0/chap-type":            "1\n",
		d + "target0/target-name":          "iqn.2003-01.org.linux-iscsi.san:boot\n",
		d + "target0/chap-name":            "edge-17\n",
		d + "target0/chap-secret":          chapSecret + "\n",
		d + "target0/rev-chap-name":        "san\n",
		d + "target0/rev-chap-name-secret": chapSecret + "-rev\n",
		d + "target1/index":                "1\n",
		d + "target1/flags":                "1\n",
		d + "target1/ip-addr":              "fd00:0040:0000:0000:0000:0000:0000:0005\n",
		d + "target1/port":                 "3261\n",
		d + "target1/lun":                  "410000000\n", // flat addressing, LUN 256
		d + "target1/nic-assoc":            "1\n",
		d + "target1/chap-type":            "0\n",
		d + "target1/target-name":          "iqn.2003-01.org.linux-iscsi.san:boot\n",
		// An unused slot: the kernel hides target-name when its length is 0.
		d + "target2/index":     "2\n",
		d + "target2/flags":     "0\n",
		d + "target2/ip-addr":   "0.0.0.0\n",
		d + "target2/port":      "0\n",
		d + "target2/lun":       "00000000\n",
		d + "target2/nic-assoc": "0\n",

		// ethernet0's PCI function links to its netdev; ethernet1 has
		// no device link (a virtual NIC) and is found by MAC, where a
		// VLAN on top shares the MAC.
		d + "ethernet0/device/net/enp3s0/address": "52:54:00:aa:bb:01\n",
		"sys/class/net/enp3s0/address":            "52:54:00:aa:bb:01\n",
		"sys/class/net/enp4s0.40/address":         "52:54:00:aa:bb:02\n",
		"sys/class/net/enp4s0/address":            "52:54:00:aa:bb:02\n",
		"sys/class/net/lo/address":                "00:00:00:00:00:00\n",
	})
	mkdirs(t, root, "sys/class/net/enp4s0/device")
	return root
}

func TestReadIBFT(t *testing.T) {
	root := ibftFixture(t)
	got, err := ReadIBFT(root)
	if err != nil {
		t.Fatalf("ReadIBFT: %v", err)
	}
	want := &IBFT{
		Initiator: "iqn.2010-04.org.ipxe:edge-17",
		Targets: []IBFTTarget{
			{
				Name: "target0", Index: 0, Valid: true, BootSelected: true,
				IP: "192.168.40.5", Port: 3260, IQN: "iqn.2003-01.org.linux-iscsi.san:boot",
				LUN: 1, LUNText: "01000000", NICIndex: 0, CHAPType: 1, CHAPName: "edge-17", ReverseCHAPName: "san",
			},
			{
				Name: "target1", Index: 1, Valid: true,
				IP: "fd00:40::5", Port: 3261, IQN: "iqn.2003-01.org.linux-iscsi.san:boot",
				LUN: 256, LUNText: "410000000", NICIndex: 1,
			},
		},
		NICs: []IBFTNIC{
			{
				Name: "ethernet0", Index: 0, Valid: true, BootSelected: true,
				IP: "192.168.40.17", PrefixLen: 24, Gateway: "192.168.40.1", DHCP: "192.168.40.1",
				Origin: 3, MAC: "52:54:00:aa:bb:01", Hostname: "edge-17", Interface: "enp3s0",
			},
			{
				Name: "ethernet1", Index: 1, Valid: true,
				IP: "fd00:40::17", PrefixLen: 64, VLAN: 40, MAC: "52:54:00:aa:bb:02", Interface: "enp4s0",
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadIBFT:\n got %+v\nwant %+v", got, want)
	}

	// The CHAP secrets are in the fixture; they must not be anywhere a
	// status line or a log could print them.
	js, _ := json.Marshal(got)
	for _, out := range []string{fmt.Sprintf("%+v", got), fmt.Sprintf("%#v", got), string(js)} {
		if strings.Contains(out, chapSecret) {
			t.Fatalf("CHAP secret leaked into %s", out)
		}
	}
}

func TestReadIBFTAbsent(t *testing.T) {
	got, err := ReadIBFT(t.TempDir())
	if got != nil || err != nil {
		t.Errorf("no iBFT: got %v, %v; want nil, nil", got, err)
	}
}

func TestReadIBFTBadAttributes(t *testing.T) {
	cases := []struct {
		file, content, want string
	}{
		{"target0/port", "http\n", "target0/port: \"http\" is not a number"},
		{"target0/ip-addr", "192.168.40.500\n", "target0/ip-addr: \"192.168.40.500\" is not an IP address"},
		{"target0/nic-assoc", "", "target0/nic-assoc: missing"},
		{"ethernet0/vlan", "x\n", "ethernet0/vlan: \"x\" is not a number"},
		{"ethernet1/gateway", "nope\n", "ethernet1/gateway"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			root := ibftFixture(t)
			writeFile(t, filepath.Join(root, "sys/firmware/ibft", c.file), []byte(c.content))
			got, err := ReadIBFT(root)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %+v, %v; want an error mentioning %q", got, err, c.want)
			}
		})
	}
	t.Run("missing ip-addr", func(t *testing.T) {
		root := ibftFixture(t)
		if err := os.Remove(filepath.Join(root, "sys/firmware/ibft/target1/ip-addr")); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadIBFT(root); err == nil || !strings.Contains(err.Error(), "target1/ip-addr: missing") {
			t.Errorf("error %v, want target1/ip-addr: missing", err)
		}
	})
	t.Run("attribute larger than a page", func(t *testing.T) {
		root := ibftFixture(t)
		writeFile(t, filepath.Join(root, "sys/firmware/ibft/initiator/initiator-name"), []byte(strings.Repeat("a", 5000)))
		if _, err := ReadIBFT(root); err == nil || !strings.Contains(err.Error(), "longer than 4096") {
			t.Errorf("error %v, want longer than 4096", err)
		}
	})
}

// renderLUN prints an 8-byte LUN the way iscsi_ibft.c does.
func renderLUN(b [8]byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, "%x", c)
	}
	return s.String()
}

func TestDecodeIBFTLUN(t *testing.T) {
	for lun := 0; lun < 256; lun++ {
		if got := decodeIBFTLUN(renderLUN([8]byte{0, byte(lun)})); got != lun {
			t.Errorf("peripheral LUN %d rendered %q decodes to %d", lun, renderLUN([8]byte{0, byte(lun)}), got)
		}
	}
	for _, lun := range []int{0, 1, 255, 256, 300, 4095, 16383} {
		b := [8]byte{0x40 | byte(lun>>8), byte(lun)}
		if got := decodeIBFTLUN(renderLUN(b)); got != lun {
			t.Errorf("flat LUN %d rendered %q decodes to %d", lun, renderLUN(b), got)
		}
	}
	for _, s := range []string{"", "0", "10000000", "0100000001", "zz000000", "0g000000", "c1000000", "123456789abcdef0"} {
		if got := decodeIBFTLUN(s); got != -1 {
			t.Errorf("%q decodes to %d, want -1 (undecodable)", s, got)
		}
	}
}

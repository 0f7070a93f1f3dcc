package firmware

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const productUUID = "4C4C4544-0042-3510-8052-B4C04F4E3332" // as a Dell BIOS reports it

func TestLoadHostIdentityFromEtc(t *testing.T) {
	root := ibftFixture(t) // firmware present, but /etc wins
	b, _ := sampleSpec().build()
	writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT"), b)
	writeTree(t, root, map[string]string{
		"etc/iscsi/initiatorname.iscsi": "## DO NOT EDIT OR REMOVE THIS FILE!\n" +
			"# InitiatorName=iqn.commented.out:no\n" +
			"InitiatorName=iqn.1993-08.org.debian:01:abcdef012345\n",
		"etc/nvme/hostnqn":              "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100\n",
		"etc/nvme/hostid":               "0F0E0D0C-0B0A-0908-0706-050403020100\n",
		"sys/class/dmi/id/product_uuid": productUUID + "\n",
	})
	got, err := LoadHostIdentity(root)
	if err != nil {
		t.Fatal(err)
	}
	want := HostIdentity{
		InitiatorName: "iqn.1993-08.org.debian:01:abcdef012345", InitiatorNameFrom: FromInitiatorFile,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100", HostNQNFrom: FromHostNQNFile,
		HostID: "0f0e0d0c-0b0a-0908-0706-050403020100", HostIDFrom: FromHostIDFile,
	}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestLoadHostIdentityFromFirmware(t *testing.T) {
	root := ibftFixture(t)
	b, _ := sampleSpec().build()
	writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT"), b)
	writeTree(t, root, map[string]string{
		// Debian's file before iscsid first ran: no name yet.
		"etc/iscsi/initiatorname.iscsi": "GenerateName=yes\n",
		"sys/class/dmi/id/product_uuid": productUUID + "\n",
	})
	got, err := LoadHostIdentity(root)
	if err != nil {
		t.Fatal(err)
	}
	want := HostIdentity{
		InitiatorName: "iqn.2010-04.org.ipxe:edge-17", InitiatorNameFrom: FromIBFT,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:11223344-5566-7788-99aa-bbccddeeff01", HostNQNFrom: FromNBFT,
		HostID: "11223344-5566-7788-99aa-bbccddeeff01", HostIDFrom: FromNBFT,
	}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestLoadHostIdentityPrimaryNBFT(t *testing.T) {
	root := t.TempDir()
	other := sampleSpec()
	other.host.flags = 1 | 1<<3 // valid, primary: unselected
	other.host.nqn = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-000000000001"
	first, _ := other.build()
	second, _ := sampleSpec().build() // primary: selected
	writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT1"), first)
	writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT2"), second)
	writeFile(t, filepath.Join(root, "sys/class/dmi/id/product_uuid"), []byte(productUUID))
	got, err := LoadHostIdentity(root)
	if err != nil {
		t.Fatal(err)
	}
	if got.HostNQN != "nqn.2014-08.org.nvmexpress:uuid:11223344-5566-7788-99aa-bbccddeeff01" {
		t.Errorf("host NQN %q is not the one from the table marked primary", got.HostNQN)
	}
}

func TestLoadHostIdentityDerived(t *testing.T) {
	mk := func(uuid string) string {
		root := t.TempDir()
		writeFile(t, filepath.Join(root, "sys/class/dmi/id/product_uuid"), []byte(uuid+"\n"))
		return root
	}
	root := mk(productUUID)
	got, err := LoadHostIdentity(root)
	if err != nil {
		t.Fatal(err)
	}
	u := strings.ToLower(productUUID)
	if got.HostNQN != "nqn.2014-08.org.nvmexpress:uuid:"+u || got.HostID != u ||
		got.HostNQNFrom != FromDMI || got.HostIDFrom != FromDMI || got.InitiatorNameFrom != FromDMI {
		t.Errorf("derived NVMe identity %+v, want the product_uuid in the standard form", got)
	}
	if !regexp.MustCompile(`^iqn\.2016-04\.com\.open-iscsi:[0-9a-f]{12}$`).MatchString(got.InitiatorName) {
		t.Errorf("derived initiator name %q", got.InitiatorName)
	}

	again, err := LoadHostIdentity(mk(productUUID))
	if err != nil || again != got {
		t.Errorf("same product_uuid, different identity: %+v vs %+v (%v)", again, got, err)
	}
	other, err := LoadHostIdentity(mk("4C4C4544-0042-3510-8052-B4C04F4E3333"))
	if err != nil || other.InitiatorName == got.InitiatorName || other.HostNQN == got.HostNQN || other.HostID == got.HostID {
		t.Errorf("different hosts share an identity: %+v vs %+v (%v)", other, got, err)
	}
}

func TestLoadHostIdentityMachineID(t *testing.T) {
	const mid = "5f3b2f6e1c8a4d7e9b0a1c2d3e4f5a6b"
	mk := func(uuid, machineID string) string {
		root := t.TempDir()
		if uuid != "" {
			writeFile(t, filepath.Join(root, "sys/class/dmi/id/product_uuid"), []byte(uuid+"\n"))
		}
		writeFile(t, filepath.Join(root, "etc/machine-id"), []byte(machineID+"\n"))
		return root
	}
	// A placeholder product_uuid, shared by every board of a model, and
	// no product_uuid at all (a VM without SMBIOS) both fall to machine-id.
	a, err := LoadHostIdentity(mk("03000200-0400-0500-0006-000700080009", mid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadHostIdentity(mk("", mid))
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a.HostIDFrom != FromMachineID || a.HostNQNFrom != FromMachineID {
		t.Errorf("machine-id identity not stable or not marked: %+v vs %+v", a, b)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(a.HostID) {
		t.Errorf("host ID %q is not a version 8 UUID", a.HostID)
	}
	if strings.Contains(strings.ReplaceAll(a.HostID, "-", ""), mid[:12]) {
		t.Errorf("host ID %q exposes the machine ID", a.HostID)
	}
	c, err := LoadHostIdentity(mk("", "6f3b2f6e1c8a4d7e9b0a1c2d3e4f5a6b"))
	if err != nil || c.HostID == a.HostID {
		t.Errorf("different machine IDs, same host ID %q (%v)", c.HostID, err)
	}

	_, err = LoadHostIdentity(mk("00000000-0000-0000-0000-000000000000", "uninitialized"))
	if !errors.Is(err, ErrNoIdentity) {
		t.Errorf("no usable source: error %v, want ErrNoIdentity", err)
	}
}

func TestLoadHostIdentityHostIDFollowsHostNQN(t *testing.T) {
	root := t.TempDir()
	b, _ := sampleSpec().build()
	writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT"), b)
	writeTree(t, root, map[string]string{
		"sys/class/dmi/id/product_uuid": productUUID,
		"etc/nvme/hostnqn":              "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100",
	})
	got, err := LoadHostIdentity(root)
	if err != nil {
		t.Fatal(err)
	}
	if got.HostID != "0f0e0d0c-0b0a-0908-0706-050403020100" || got.HostIDFrom != FromHostNQN {
		t.Errorf("host ID %q from %q, want the uuid of the configured host NQN", got.HostID, got.HostIDFrom)
	}

	// A configured NQN that is not in uuid form must not borrow the
	// firmware's host ID: the kernel refuses one host ID under two NQNs.
	writeFile(t, filepath.Join(root, "etc/nvme/hostnqn"), []byte("nqn.2024-01.io.example:edge-17\n"))
	got, err = LoadHostIdentity(root)
	if err != nil {
		t.Fatal(err)
	}
	if got.HostID != strings.ToLower(productUUID) || got.HostIDFrom != FromDMI {
		t.Errorf("host ID %q from %q, want the derived one", got.HostID, got.HostIDFrom)
	}
}

func TestLoadHostIdentityErrors(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		nbft  []byte
		want  string
	}{
		{"bad hostid", map[string]string{"etc/nvme/hostid": "not-a-uuid\n"}, nil, "etc/nvme/hostid: \"not-a-uuid\" is not a UUID"},
		{"bad hostnqn", map[string]string{"etc/nvme/hostnqn": "host-17\n"}, nil, `etc/nvme/hostnqn: "host-17" does not start with "nqn."`},
		{"hostnqn with a space", map[string]string{"etc/nvme/hostnqn": "nqn.2024-01.io.example:a b\n"}, nil, "space or control character"},
		{"bad initiator name", map[string]string{"etc/iscsi/initiatorname.iscsi": "InitiatorName=edge-17\n"}, nil, "initiatorname.iscsi: InitiatorName: \"edge-17\""},
		{"unreadable NBFT needed", nil, []byte("NBFT garbage"), "NBFT: invalid firmware table"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, c.files)
			writeFile(t, filepath.Join(root, "sys/class/dmi/id/product_uuid"), []byte(productUUID))
			if c.nbft != nil {
				writeFile(t, filepath.Join(root, "sys/firmware/acpi/tables/NBFT"), c.nbft)
			}
			got, err := LoadHostIdentity(root)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %+v, %v; want an error mentioning %q", got, err, c.want)
			}
		})
	}

	// The same broken NBFT does not matter when /etc names the host.
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"etc/nvme/hostnqn":              "nqn.2024-01.io.example:edge-17",
		"etc/nvme/hostid":               "0f0e0d0c-0b0a-0908-0706-050403020100",
		"sys/firmware/acpi/tables/NBFT": "NBFT garbage",
		"sys/class/dmi/id/product_uuid": productUUID,
	})
	if _, err := LoadHostIdentity(root); err != nil {
		t.Errorf("configured identity, broken NBFT: %v", err)
	}
}

package nvme

// Reading controllers from sysfs, a host without the NVMe modules, and a rescan.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestControllers(t *testing.T) {
	f := newFake(t, false)
	for range 11 {
		f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, state: "live"})
	}
	// A PCIe controller: its address is a PCI address, not key=value.
	pci := filepath.Join(f.sys, "devices/pci0000:00/0000:00:04.0/nvme/nvme11")
	attrs(t, pci, map[string]string{"transport": "pcie", "address": "0000:00:04.0", "state": "live", "subsysnqn": "nqn.2019-08.org.qemu:deadbeef", "cntlid": "0"})
	symlink(t, "../../devices/pci0000:00/0000:00:04.0/nvme/nvme11", filepath.Join(f.sys, "class/nvme/nvme11"))
	// A controller being removed while listed: no attributes left.
	mkdir(t, filepath.Join(f.sys, "class/nvme/nvme12"))

	ctrls, err := f.client().Controllers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrls) != 12 {
		t.Fatalf("%d controllers, want 12: %+v", len(ctrls), ctrls)
	}
	for i, c := range ctrls {
		if c.Instance != i {
			t.Fatalf("controller %d is %s: not in instance order", i, c.Name)
		}
	}
	tcp := ctrls[10]
	want := Controller{
		Name: "nvme10", Instance: 10, Transport: "tcp",
		Address:    Address{TrAddr: "192.0.2.11", TrSvcID: "4420"},
		RawAddress: "traddr=192.0.2.11,trsvcid=4420", SubsysNQN: nqnData, State: "live",
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100",
		HostID:  "0f0e0d0c-0b0a-0908-0706-050403020100", CntlID: 11, Subsystem: "nvme-subsys0",
	}
	if tcp != want {
		t.Errorf("nvme10 = %+v\nwant   %+v", tcp, want)
	}
	if got, ok := tcp.Target(); !ok || got.Key() != tgtData.Key() {
		t.Errorf("nvme10.Target() = %+v, %v", got, ok)
	}
	if p := ctrls[11]; p.Transport != "pcie" || p.RawAddress != "0000:00:04.0" || p.Address != (Address{}) {
		t.Errorf("pcie controller = %+v", p)
	} else if _, ok := p.Target(); ok {
		t.Error("a pcie controller has a fabrics target")
	}
}

func TestNoNVMeModules(t *testing.T) {
	c := &Client{SysRoot: t.TempDir(), DevRoot: t.TempDir()}
	ctrls, err := c.Controllers()
	if err != nil || len(ctrls) != 0 {
		t.Fatalf("Controllers without /sys/class/nvme = %v, %v", ctrls, err)
	}
	_, err = c.Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
	if !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "nvme-fabrics module") {
		t.Fatalf("Connect without /dev/nvme-fabrics = %v", err)
	}
}

func TestRescan(t *testing.T) {
	f := newFake(t, false)
	name := f.addController(ctrlSpec{transport: "tcp", traddr: "192.0.2.11", trsvcid: "4420", nqn: nqnData, state: "live"})
	c := f.client()
	if err := c.Rescan(name); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.sys, "class/nvme", name, "rescan_controller")); string(b) != "1" {
		t.Errorf("rescan_controller = %q, want 1", b)
	}
	for _, bad := range []string{"../nvme0", "nvme0/..", "nvme", "sda"} {
		if err := c.Rescan(bad); err == nil {
			t.Errorf("Rescan(%q) accepted", bad)
		}
	}
}

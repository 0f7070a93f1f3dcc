package hostcheck_test

import (
	"testing"

	. "github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/iscsi"
	"github.com/volumed/volumed/kinds/loop"
	"github.com/volumed/volumed/kinds/nvme"
)

// TestSources checks the needs the kinds declare against a host.
func TestSources(t *testing.T) {
	loopNeeds := loop.Kind{}.Needs(nil)
	iscsiNeeds := iscsi.Kind{}.Needs(&iscsi.Source{})
	nvmeTCP := nvme.Kind{}.Needs(&nvme.Source{Transport: "tcp"})

	h := FakeHost(t, nil, "", "kernel/drivers/nvme/host/nvme-fabrics.ko.xz")
	if got, want := Whats(h.Lacks(loopNeeds)), "loop devices in its kernel"; got != want {
		t.Errorf("loop without /dev/loop-control or a module lacks %q, want %q", got, want)
	}
	if got, want := Whats(h.Lacks(iscsiNeeds)), "iscsiadm, iSCSI in its kernel"; got != want {
		t.Errorf("iscsi lacks %q, want %q", got, want)
	}
	if got, want := Whats(h.Lacks(nvmeTCP)), "NVMe/TCP in its kernel"; got != want {
		t.Errorf("nvme tcp lacks %q, want %q", got, want)
	}
	h2 := FakeHost(t, []string{"iscsiadm"}, "", "kernel/drivers/scsi/iscsi_tcp.ko", "kernel/drivers/nvme/host/nvme-tcp.ko", "kernel/drivers/block/loop.ko.xz")
	if got := Whats(h2.Lacks(loopNeeds)); got != "" {
		t.Errorf("loop as a module lacks %q, want nothing", got)
	}
	if got, want := Whats(h2.Lacks(nvmeTCP)), "NVMe over Fabrics in its kernel"; got != want {
		t.Errorf("nvme without nvme-fabrics lacks %q, want %q", got, want)
	}
	if got := Whats(h2.Lacks(iscsiNeeds)); got != "" {
		t.Errorf("iscsi with iscsiadm and iscsi_tcp lacks %q, want nothing", got)
	}
}

package ostest

import (
	"fmt"
	"testing"
)

// AddPullableDisk is AddDisk for a disk a test pulls out of the running
// guest (Run.PullDisk): its qemu device has an id.
func (m *Machine) AddPullableDisk(serial string, size int64) string {
	m.t.Helper()
	p := m.AddDisk(serial, size)
	m.disks[len(m.disks)-1].id = pullID(serial)
	return p
}

func pullID(serial string) string { return "pull-" + serial }

// PullDisk hot-unplugs the disk of that serial (AddPullableDisk) from the
// running guest, as a disk that fails or is pulled out: qemu's
// device_del, which the guest's PCI hotplug completes. It is still
// attached at the machine's next boot.
func (r *Run) PullDisk(t testing.TB, serial string) {
	t.Helper()
	out, err := r.Monitor("device_del " + pullID(serial))
	if err == nil && out != "" {
		err = fmt.Errorf("qemu said %q", out)
	}
	if err != nil {
		t.Fatalf("%s boot %d: pull disk %s: %v", r.m.Name, r.n, serial, err)
	}
}

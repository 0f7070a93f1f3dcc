package main

import (
	"slices"
	"testing"

	"github.com/volumed/volumed/internal/uevent"
)

func TestBlockWake(t *testing.T) {
	await := []string{"disk", "device"}
	tests := []struct {
		action      string
		retry       bool // volumes of await retry now
		verify, gro bool
		device      string
		added       bool // sources that take disks in (a VG with grow: true) check
	}{
		{uevent.Overflow, true, true, true, "", false}, // Grow of every volume checks them too
		{"add", true, false, false, "", true},
		// A holder removed (dmsetup remove, vgchange -an, cryptsetup
		// close) frees a disk a volume was refused as InUse.
		{"remove", true, true, false, "dm-0", false},
		{"change", false, false, true, "dm-0", false},
	}
	for _, tt := range tests {
		w, ok := blockWake(uevent.Event{Action: tt.action, DevName: "dm-0", DevPath: "/devices/virtual/block/dm-0", Subsystem: "block"}, await)
		if !ok || slices.Equal(w.Drivers, await) != tt.retry || w.Verify != tt.verify || w.Grow != tt.gro || w.Device != tt.device || w.Added != tt.added || w.Unplugged {
			t.Errorf("%s: %+v, %v; want retry %v, verify %v, grow %v, device %q, added %v", tt.action, w, ok, tt.retry, tt.verify, tt.gro, tt.device, tt.added)
		}
	}
	if _, ok := blockWake(uevent.Event{Action: "bind"}, await); ok {
		t.Error("a bind event wakes the agent")
	}
	// A disk that goes (a raid1 leg pulled) may be a PV under a volume's
	// LV, which no volume holds: the health checks run at once.
	w, _ := blockWake(uevent.Event{Action: "remove", DevName: "vdb", DevPath: "/devices/pci0000:00/0000:00:05.0/virtio3/block/vdb", Subsystem: "block"}, await)
	if !w.Unplugged || !w.Verify || w.Device != "vdb" {
		t.Errorf("a disk removed: %+v, want Unplugged, Verify, device vdb", w)
	}
}

package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/volumed/volumed/agent"
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
		// A waiting volume whose wait is stated may be brought by a
		// change (decide.Concerns says which).
		{"change", true, false, true, "dm-0", false},
	}
	for _, tt := range tests {
		facts := func() *agent.DeviceEvent { return &agent.DeviceEvent{Action: tt.action, Name: "dm-0"} }
		w, ok := blockWake(uevent.Event{Action: tt.action, DevName: "dm-0", DevPath: "/devices/virtual/block/dm-0", Subsystem: "block"}, await, facts)
		if !ok || slices.Equal(w.Drivers, await) != tt.retry || w.Verify != tt.verify || w.Grow != tt.gro || w.Device != tt.device || w.Added != tt.added ||
			(w.Facts != nil) != (tt.action != uevent.Overflow) || w.Unplugged {
			t.Errorf("%s: %+v, %v; want retry %v, verify %v, grow %v, device %q, added %v", tt.action, w, ok, tt.retry, tt.verify, tt.gro, tt.device, tt.added)
		}
	}
	if _, ok := blockWake(uevent.Event{Action: "bind"}, await, nil); ok {
		t.Error("a bind event wakes the agent")
	}
	// A disk that goes (a raid1 leg pulled) may be a PV under a volume's
	// LV, which no volume holds: the health checks run at once.
	w, _ := blockWake(uevent.Event{Action: "remove", DevName: "vdb", DevPath: "/devices/pci0000:00/0000:00:05.0/virtio3/block/vdb", Subsystem: "block"}, await, nil)
	if !w.Unplugged || !w.Verify || w.Device != "vdb" {
		t.Errorf("a disk removed: %+v, want Unplugged, Verify, device vdb", w)
	}
}

// deviceEvent reads what decide.Concerns weighs from sysfs: the device's
// keys, an LV's VG, volumed's own LUKS mapping, a device with no size yet.
func TestDeviceEvent(t *testing.T) {
	sys := t.TempDir()
	dev := func(path string, files map[string]string) {
		for f, v := range files {
			p := filepath.Join(sys, path, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dev("devices/virtual/block/dm-0", map[string]string{"size": "2048", "uevent": "DEVNAME=dm-0", "dm/name": "vg--a-data", "dm/uuid": "LVM-xyz"})
	dev("devices/virtual/block/dm-1", map[string]string{"size": "2048", "uevent": "DEVNAME=dm-1", "dm/name": "volumed-secret", "dm/uuid": "CRYPT-LUKS2-abc-volumed-secret"})
	dev("devices/virtual/block/loop7", map[string]string{"size": "0", "uevent": "DEVNAME=loop7"})
	dev("devices/pci/virtio4/block/vdb", map[string]string{"size": "2048", "uevent": "DEVNAME=vdb", "serial": "VGA"})
	dev("devices/pci/virtio5/block/vdc", map[string]string{"size": "2048", "uevent": "DEVNAME=vdc", "holders/dm-0": ""})
	log := slog.New(slog.DiscardHandler)
	ev := func(action, path string) *agent.DeviceEvent {
		return deviceEvent(uevent.Event{Action: action, DevPath: "/" + path, DevName: filepath.Base(path), Subsystem: "block"}, sys, log)
	}
	for _, c := range []struct {
		got  *agent.DeviceEvent
		want agent.DeviceEvent
	}{
		{ev("change", "devices/virtual/block/dm-0"), agent.DeviceEvent{Action: "change", Name: "dm-0",
			Keys: []string{"device:path:/dev/dm-0", "device:path:/dev/mapper/vg--a-data"}, VG: "vg-a"}},
		{ev("change", "devices/virtual/block/dm-1"), agent.DeviceEvent{Action: "change", Name: "dm-1",
			Keys: []string{"device:path:/dev/dm-1", "device:path:/dev/mapper/volumed-secret"}, Ours: true}},
		{ev("add", "devices/virtual/block/loop7"), agent.DeviceEvent{Action: "add", Name: "loop7",
			Keys: []string{"device:path:/dev/loop7"}, Empty: true}},
		{ev("add", "devices/pci/virtio4/block/vdb"), agent.DeviceEvent{Action: "add", Name: "vdb",
			Keys: []string{"device:path:/dev/vdb", "device:serial:VGA"}}},
		{ev("change", "devices/pci/virtio5/block/vdc"), agent.DeviceEvent{Action: "change", Name: "vdc",
			Keys: []string{"device:path:/dev/vdc"}, Held: true}},
		{ev("remove", "devices/pci/virtio4/block/vdd"), agent.DeviceEvent{Action: "remove", Name: "vdd"}},
	} {
		if c.got == nil || !reflect.DeepEqual(*c.got, c.want) {
			t.Errorf("deviceEvent = %+v, want %+v", c.got, c.want)
		}
	}
	// A device gone before it was read brings nothing.
	if got := ev("add", "devices/pci/virtio4/block/vdz"); got == nil || !got.Empty {
		t.Errorf("deviceEvent of a device gone = %+v, want it empty", got)
	}
}

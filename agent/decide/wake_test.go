package decide

import "testing"

func TestConcerns(t *testing.T) {
	serial := "device:serial:S1"
	disk := func(action string, keys ...string) DeviceEvent {
		return DeviceEvent{Action: action, Name: "sdb", Keys: append([]string{"device:path:/dev/sdb"}, keys...)}
	}
	loop := DeviceEvent{Action: DeviceChange, Name: "loop3", Keys: []string{"device:path:/dev/loop3"}}
	ownLoop := loop
	ownLoop.Ours = true
	unbound := DeviceEvent{Action: DeviceAdd, Name: "loop4", Keys: []string{"device:path:/dev/loop4"}, Empty: true}
	lv := func(vg string) DeviceEvent {
		return DeviceEvent{Action: DeviceChange, Name: "dm-2", Keys: []string{"device:path:/dev/dm-2", "device:path:/dev/mapper/" + vg + "-data"}, VG: vg}
	}
	mapping := DeviceEvent{Action: DeviceChange, Name: "dm-5", Keys: []string{"device:path:/dev/dm-5", "device:path:/dev/mapper/volumed-secret"}, Ours: true}
	gone := DeviceEvent{Action: DeviceRemove, Name: "dm-1"}
	ownGone := DeviceEvent{Action: DeviceRemove, Name: "loop2", Ours: true}

	bySerial := &Awaited{Keys: []string{serial}}
	byMapper := &Awaited{Keys: []string{"device:path:/dev/mapper/volumed-secret"}}
	pvs := &Awaited{AnyDisk: true}
	pool := &Awaited{LVsOf: "vg0", AnyDisk: true}
	held := &Awaited{Keys: []string{"device:path:/dev/sdb"}, Release: true}
	for _, c := range []struct {
		name string
		ev   DeviceEvent
		w    *Awaited
		want bool
	}{
		// A wait that stated nothing: every add and remove, as before.
		{"unstated wait, any add", disk(DeviceAdd), nil, true},
		{"unstated wait, any remove", gone, nil, true},
		{"unstated wait, a change", disk(DeviceChange), nil, false},
		{"unstated wait, even our own device", ownGone, nil, true},

		{"the disk of the serial appears", disk(DeviceAdd, serial), bySerial, true},
		{"the disk of the serial changes (e.g. its medium)", disk(DeviceChange, serial), bySerial, true},
		{"another disk appears", disk(DeviceAdd, "device:serial:S2"), bySerial, false},
		{"a loop device someone binds", loop, bySerial, false},
		{"an LV activated", lv("vg0"), bySerial, false},
		{"a device goes", gone, bySerial, false},
		{"named exactly, though ours", mapping, byMapper, true},

		{"a new disk may be a PV or picked", disk(DeviceAdd), pvs, true},
		{"a disk written (pvcreate, wipefs) may be one now", disk(DeviceChange), pvs, true},
		{"a loop device someone binds may be one", loop, pvs, true},
		{"our own loop device never is", ownLoop, pvs, false},
		{"our own LUKS mapping never is", mapping, pvs, false},
		{"an unbound loop device is nothing yet", unbound, pvs, false},
		{"an LV is never a PV", lv("vg0"), pvs, false},
		{"a PV whose metadata an lvcreate rewrote (held by its LVs)", DeviceEvent{Action: DeviceChange, Name: "vdb", Keys: []string{"device:path:/dev/vdb"}, Held: true}, pvs, false},
		{"a held disk named exactly", DeviceEvent{Action: DeviceChange, Name: "sdb", Keys: []string{"device:path:/dev/sdb", serial}, Held: true}, bySerial, true},
		{"a device going brings no disk", gone, pvs, false},

		{"an LV of the VG (its thin pool)", lv("vg0"), pool, true},
		{"an LV of another VG", lv("vg1"), pool, false},
		{"an LV of the VG not resumed yet", DeviceEvent{Action: DeviceAdd, Name: "dm-2", VG: "vg0", Empty: true}, pool, false},

		{"a holder going", gone, held, true},
		{"our own device going is no holder outside volumed", ownGone, held, false},
		{"a holder appearing", disk(DeviceAdd, "device:serial:S9"), &Awaited{Release: true}, false},

		{"an action no rule knows", DeviceEvent{Action: "move", Name: "sdb"}, pvs, false},
	} {
		if got := Concerns(c.ev, c.w); got != c.want {
			t.Errorf("%s: Concerns = %v, want %v", c.name, got, c.want)
		}
	}
}

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
	}{
		{uevent.Overflow, true, true, true, ""},
		{"add", true, false, false, ""},
		// A holder removed (dmsetup remove, vgchange -an, cryptsetup
		// close) frees a disk a volume was refused as InUse.
		{"remove", true, true, false, "dm-0"},
		{"change", false, false, true, "dm-0"},
	}
	for _, tt := range tests {
		w, ok := blockWake(uevent.Event{Action: tt.action, DevName: "dm-0", Subsystem: "block"}, await)
		if !ok || slices.Equal(w.Drivers, await) != tt.retry || w.Verify != tt.verify || w.Grow != tt.gro || w.Device != tt.device {
			t.Errorf("%s: %+v, %v; want retry %v, verify %v, grow %v, device %q", tt.action, w, ok, tt.retry, tt.verify, tt.gro, tt.device)
		}
	}
	if _, ok := blockWake(uevent.Event{Action: "bind"}, await); ok {
		t.Error("a bind event wakes the agent")
	}
}

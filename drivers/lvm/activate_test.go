package lvm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// lvm2 2.03's own words when it will not activate an LV.
func TestActivationReason(t *testing.T) {
	for _, c := range []struct{ said, want string }{
		{"  WARNING: Couldn't find device with uuid 3Xw0uN-kCjZ-ltGk-Ww0E-Qe0Q-Bn5v-pwXYUg.\n  WARNING: VG vg0 is missing PV 3Xw0uN-kCjZ-ltGk-Ww0E-Qe0Q-Bn5v-pwXYUg (last written to /dev/vdc).\n  Refusing activation of partial LV vg0/data.  Use '--activationmode partial' to override.", ReasonPVMissing},
		{"  Check of pool vg0/pool failed (status:1). Manual repair required!", ReasonPoolCheck},
		{"  /usr/sbin/thin_check: execvp failed: No such file or directory\n  Check of pool vg0/pool failed (status:2). Manual repair required!", ReasonPoolCheck},
		{"  Can't process LV vg0/m: raid1 target support missing from kernel?", ReasonTargetMissing},
		{"  Not activating vg0/data since it does not pass activation filter.", ReasonFiltered},
		// TestLVMRaid's guest: lvcreate under volumed's unit, which may not load modules.
		{"/sbin/modprobe failed: 1\n  raid1: Required device-mapper target(s) not detected in your kernel.\n  Run `lvcreate --help' for more information.", ReasonTargetMissing},
		{"  device-mapper: reload ioctl on  (253:3) failed: Invalid argument", ReasonRefused},
	} {
		if got := ActivationReason(c.said); got != c.want {
			t.Errorf("ActivationReason(%q) = %s, want %s", c.said, got, c.want)
		}
	}
}

// A refused activation is an *ActivateError with the reason, lvm2's
// words and what to do.
func TestActivateRefused(t *testing.T) {
	f := &fakeLVM{fail: map[string]string{"lvchange": "  Refusing activation of partial LV vg0/data.  Use '--activationmode partial' to override.\n"}}
	err := Tool{Runner: f}.Activate(context.Background(), LV{VG: "vg0", Name: "data"})
	var ae *ActivateError
	if !errors.As(err, &ae) || ae.Reason != ReasonPVMissing || !strings.Contains(err.Error(), "activate LV vg0/data: lvm lvchange: Refusing activation of partial LV vg0/data") ||
		!strings.Contains(err.Error(), "bring it back") {
		t.Errorf("Activate = %v, want an ActivateError, PhysicalVolumeMissing, with lvm2's words and what to do", err)
	}
}

// lvcreate refused for a kernel target missing is an ActivateError
// (the volume says ActivationFailed, KernelTargetMissing); refused for
// space it is not.
func TestCreateRefused(t *testing.T) {
	w := Want{Volume: "m", VG: "vg0", Name: "m", Size: 1 << 30, Type: Raid1}
	f := &fakeLVM{fail: map[string]string{"lvcreate": "  /sbin/modprobe failed: 1\n  raid1: Required device-mapper target(s) not detected in your kernel.\n"}}
	err := Tool{Runner: f}.Create(context.Background(), w)
	var ae *ActivateError
	if !errors.As(err, &ae) || ae.Reason != ReasonTargetMissing || !strings.Contains(err.Error(), "modules-load.d") {
		t.Errorf("Create without dm-raid = %v, want an ActivateError, KernelTargetMissing, saying how to load it", err)
	}
	f = &fakeLVM{fail: map[string]string{"lvcreate": "  Volume group \"vg0\" has insufficient free space (10 extents): 256 required.\n"}}
	if err := (Tool{Runner: f}).Create(context.Background(), w); errors.As(err, &ae) || err == nil {
		t.Errorf("Create without space = %v, want a plain error", err)
	}
}

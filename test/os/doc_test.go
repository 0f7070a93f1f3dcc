// Package ostest boots a real OS with volumed in it: Debian 12 built with
// mmdebstrap (systemd as PID 1, udev, Debian's cloud kernel, the .deb of
// this tree installed by dpkg with its shipped units), under qemu (TCG).
// Its tests reboot it, power it off, cut its power and upgrade the
// package, and check what an operator would.
//
// The harness:
//
//	img := Base(t)                       // built once per test binary, cached
//	m := img.NewMachine(t, "name")       // a qcow2 overlay of the base disk
//	m.AddFile("/etc/volumed/volumes.d/data.yaml", 0o644, manifest)
//	m.AddUnit("x.service", unit, "multi-user.target")
//	m.AddTest("probe", "After=volumed-wait@data.service", script)
//	m.AddDisk("DATA1", 64<<20)           // a virtio disk, by-id virtio-DATA1
//	m.QemuArgs = append(m.QemuArgs, ...)  // anything else for qemu
//	r := m.Boot(ctx)                     // seed disk with the files, qemu starts
//	r.WaitDone(t, "probe", 3*time.Minute) // the guest said "done_step probe"
//	r.KV("uuid.data"); r.CheckGuest(t)   // values and failures it reported
//	r.Monitor("system_powerdown")        // HMP
//	r.PullDisk(t, "DATA1")               // hot-unplug a disk added with m.AddPullableDisk (device_del)
//	r.Kill()                             // a power cut (SIGKILL to qemu)
//	r.Finish(t, "probe", time.Minute)    // WaitDone, then Kill: a boot with nothing left to check
//	r.Wait(t, time.Minute)               // qemu exits: poweroff, or reboot (-no-reboot)
//	r2 := m.Boot(ctx)                    // the same disk again: a reboot
//	o := m.Offline(t)                    // after qemu exits: a raw copy on the host
//	o.Fsck(t); o.Journal(t, "-u", "volumed")
//
// Many machines alike up to a point (the power cuts) share that boot: a
// template machine, whose extra disks are qcow2 (AddQcow2Disk), boots to
// a guest script waiting at waitConsoleLine and is saved there with its
// memory (qemu savevm); each machine made from it resumes there:
//
//	snap := tm.Boot(ctx).SaveWhenWaiting(t, "name")
//	m := img.NewMachineFrom(t, "cut01", snap) // copies of its disks
//	r := m.Boot(ctx)                     // -loadvm: resumes, and is sent the line it waits for
//
// The files a test adds reach the guest at its next boot as a tar archive
// on a small disk (serial ostest-seed) that a systemd generator in the
// image (guest/ostest-seed) unpacks into / before systemd loads its units:
// units, manifests and scripts are there as if built into the image.
// Scripts added with AddTest source guest/lib.sh and report on the serial
// console with marked lines: log (OSTEST-LOG, copied to the test's log),
// kv (OSTEST-KV key value), fail (OSTEST-FAIL, see CheckGuest) and
// done_step (OSTEST-DONE). The whole console of a boot is in the test's
// output when the test fails.
//
// The image (build-image.sh, guest/customize.sh) holds what every test of
// the tier needs (Packages) and masks units no test needs (gettys, timers,
// clock sync): one image per run, built in 1 to 2 minutes and cached by a
// hash of the .deb and the recipe. At most one VM per CPU and one more
// run at once; Boot waits for a slot.
//
// Knobs (environment):
//
//	VOLUMED_OS_CACHE  the image cache (default <repo>/.cache/os)
//	VOLUMED_OS_ACCEL  tcg (default) or kvm (this machine's /dev/kvm opens, but its
//	                  guests die at their first cmpxchg16b: KVM internal error)
//	VOLUMED_OS_CPU    qemu's -cpu under TCG (default qemu64)
//	VOLUMED_OS_KEEP   keep each machine's directory (disks, console logs) after the test
//	VOLUMED_BENCH_BOOT=1  run TestBootCost, the boot-cost benchmark (make bench-boot),
//	                      VOLUMED_BENCH_BOOTS boots of each kind (default 3);
//	                      VOLUMED_BENCH_ONEWAIT=1 adds a consumer after one wait for all 20
package ostest

import (
	"strings"
)

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

package ostest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	lvmdrv "github.com/volumed/volumed/drivers/lvm"
)

// foreignUUID is the filesystem on the LV of the VG volumed did not make.
const foreignUUID = "8e3b1c0a-7f4d-4a52-9c1e-2b6d0f3a5c71"

// groupPrep runs before volumed at the first boot: the foreign VG
// vgforeign (LV fl, ext4) on VGFOREIGN, and on VGB what a SIGKILL of
// volumed between its pvcreate and its vgcreate leaves: an orphan PV with
// the UUID volumed gives it (%s), made with a 4 MiB data alignment that
// volumed's pvcreate never asks for, so a second pvcreate would show (its
// data would start at 1 MiB). At every boot it says whether vgsel/data
// is active before volumed starts.
const groupPrep = `#!/bin/sh
. /usr/lib/ostest/lib.sh
# dev_of SERIAL: the virtio disk of that serial, read by the shell (a
# cat per disk cost ~0.2 s of emulated CPU each, at every look-up).
dev_of() {
	for d in /sys/block/vd*; do
		ser=
		read -r ser 2>/dev/null <"$d/serial"
		[ "$ser" = "$1" ] && echo "/dev/${d##*/}"
	done
}
if [ -e /var/lib/ostest/group-prep ]; then
	kv prep.data.active "$(lvs --noheadings -o lv_active vgsel/data 2>&1 | tr -d ' ')"
	exit 0
fi
f=$(dev_of VGFOREIGN)
b=$(dev_of VGB)
[ -n "$f" ] && [ -n "$b" ] || { fail "no disk VGFOREIGN or VGB"; exit 1; }
check "pvcreate foreign" pvcreate -q "$f"
check "vgcreate vgforeign" vgcreate -q vgforeign "$f"
check "lvcreate fl" lvcreate -q -y -n fl -L 16M vgforeign
check "mkfs fl" mkfs.ext4 -q -U ` + foreignUUID + ` /dev/mapper/vgforeign-fl
kv foreign.pvuuid "$(pvs --noheadings -o pv_uuid "$f" | tr -d ' ')"
check "pvcreate half" pvcreate -q --uuid %s --norestorefile --dataalignment 4m "$b"
mkdir -p /var/lib/ostest
touch /var/lib/ostest/group-prep
sync /var/lib/ostest
`

// dataPattern is what the disk VGDATA holds in its first MiB: bytes of
// no known format (a raw database device), which only the blank rule's
// read of the bytes tells from blank.
var dataPattern = bytes.Repeat([]byte("page 0001 of a raw database device, no signature\n"), 16<<10)

// TestLVMGroup is the VG slice of issue 24 on a real Debian 12, two
// boots of one machine:
//
//   - a VG volumed makes (createVolumeGroup) from the disks a selector
//     picks: the blank VGA and VGB become its PVs (with volumed's UUIDs),
//     tagged volumed:vgsel, extents of 8 MiB; an LV across both, formatted
//     and mounted;
//   - VGB already held the orphan PV a crash between pvcreate and vgcreate
//     leaves: joined by its UUID, never made again (its data alignment
//     kept);
//   - the disk VGDATA (bytes, no signature) and VGFOREIGN (a VG volumed did
//     not make) match the selector and are never touched;
//   - the thin pool pool0 volumed makes in it (tagged volumed-pool:pool0,
//     the data and metadata sizes asked), a thin volume in it Ready;
//   - a volume naming the foreign VG with createVolumeGroup adopts it
//     read-only: its LV used, no tag added, nothing created, a note says so;
//   - a reboot with a blank disk VGC attached: the LV is inactive until
//     volumed (no autoactivation of a VG volumed made), which activates
//     it, same data, and with grow: true adds VGC to the VG;
//   - a SCSI disk hot-added and the size raised past what the VG holds:
//     the disk joins the VG, the LV and its filesystem grow online;
//   - then a crashpoints build of volumed, SIGKILLed at each LVM crash
//     point in turn on the spare disks CP1..CP3 (testdata/lvmcrash.sh,
//     checkLVMCrash); and an LV that follows its VG (source.lvm.grow)
//     grown by a disk that joins it.
func TestLVMGroup(t *testing.T) {
	t.Parallel()
	m, dataDisk := lvmGroupMachine(t)
	ctx := context.Background()

	r1 := m.Boot(ctx)
	r1.WaitDone(t, "boot1", bootTimeout)
	r1.Wait(t, shutdownTimeout)
	m.AddDisk("VGC", 256<<20) // attached at the next boot
	addLVMCrash(t, m)
	r2 := m.Boot(ctx)
	r2.WaitDone(t, "boot2", bootTimeout)
	hotAdd(t, r2, m.Dir, "VGD")
	r2.WaitDone(t, "grown", bootTimeout)
	r2.WaitDone(t, "crash", 2*bootTimeout) // 13 starts of volumed, 12 of them killed
	r2.WaitDone(t, "gauges", bootTimeout)
	r2.Wait(t, shutdownTimeout)

	checkFirstBoot(t, r1, r2, dataDisk)
	checkSecondBoot(t, r1, r2)
	checkLVMCrash(t, r2)
	checkLVMFollow(t, r2)
}

// lvmGroupMachine is TestLVMGroup's machine: its disks, the units and
// manifests; dataDisk is the host's file of the disk VGDATA.
func lvmGroupMachine(t *testing.T) (m *Machine, dataDisk string) {
	m = Base(t).NewMachine(t, "lvmgroup")
	m.AddDisk("VGA", 256<<20)
	m.AddDisk("VGB", 256<<20)
	dataDisk = m.AddDisk("VGDATA", 256<<20)
	if err := os.WriteFile(dataDisk, dataPattern, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(dataDisk, 256<<20); err != nil {
		t.Fatal(err)
	}
	m.AddDisk("VGFOREIGN", 64<<20)
	// A SCSI controller for the disk the host hot-adds at the second boot.
	m.QemuArgs = append(m.QemuArgs, "-device", "virtio-scsi-pci,id=scsi0")
	m.AddFile("/usr/lib/ostest/lvmgroup-prep.sh", 0o755, fmt.Sprintf(groupPrep, vgselUUID("VGB")))
	m.AddUnit("ostest-lvmgroup-prep.service", `[Unit]
Description=ostest: the foreign VG and a half-made PV, before volumed
DefaultDependencies=no
After=local-fs.target systemd-udevd.service
Before=volumed.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/ostest/lvmgroup-prep.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
`, "sysinit.target")
	m.AddFile("/etc/volumed/volumes.d/data.yaml", 0o644, `apiVersion: volumed/v1
kind: Volume
metadata: {name: data}
spec:
  source:
    lvm:
      volumeGroup: vgsel
      size: 300Mi
      createVolumeGroup:
        disks: 'disk.serial.startsWith("VG")'
        extentSize: 8Mi
        grow: true
        thinPools: [{name: pool0, size: 128Mi, metadataSize: 8Mi}]
  filesystem: {type: ext4, grow: true}
  mounts: [{path: /srv/data}]
`)
	m.AddFile("/etc/volumed/volumes.d/thin.yaml", 0o644, `apiVersion: volumed/v1
kind: Volume
metadata: {name: thin}
spec:
  source:
    lvm: {volumeGroup: vgsel, size: 256Mi, type: thin, thinPool: pool0}
  filesystem: {type: ext4}
  mounts: [{path: /srv/thin}]
`)
	m.AddFile("/etc/volumed/volumes.d/adopt.yaml", 0o644, `apiVersion: volumed/v1
kind: Volume
metadata: {name: adopt}
spec:
  source:
    lvm:
      volumeGroup: vgforeign
      name: fl
      size: 16Mi
      createVolumeGroup: {disks: 'disk.serial == "VGFOREIGN"'}
  filesystem: {type: ext4}
  mounts: [{path: /srv/adopt}]
`)
	script, err := os.ReadFile(filepath.Join("testdata", "lvmgroup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m.AddTest("lvmgroup", "Wants=volumed.service\nAfter=volumed.service", string(script))
	return m, dataDisk
}

// vgselUUID is the UUID volumed gives the PV it makes on the virtio disk
// of that serial for vgsel.
func vgselUUID(serial string) string { return lvmdrv.PVUUID("vgsel", "device:serial:"+serial) }

func expectKV(t *testing.T, r *Run, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := r.KV(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

// checkFirstBoot: the VG, the LV, the pool, the disks left alone, the
// adopted VG.
func checkFirstBoot(t *testing.T, r1, r2 *Run, dataDisk string) {
	t.Run("Create", func(t *testing.T) {
		r1.CheckGuest(t)
		expectKV(t, r1, map[string]string{
			"boot1.data.phase": "Ready", "boot1.data.fstype": "ext4", "boot1.data.tags": "volumed:data",
			"boot1.vg.tags": "volumed:vgsel", "boot1.vg.extent": "8388608", "boot1.vg.pvcount": "2",
			"boot1.data.size": fmt.Sprint(304 << 20), "boot1.data.devices": "2",
			"boot1.pv.VGA": "vgsel:" + vgselUUID("VGA") + ":1048576",
		})
	})
	t.Run("ThinPool", func(t *testing.T) {
		expectKV(t, r1, map[string]string{"boot1.pool": "pool0:thin-pool:volumed-pool:pool0:134217728", "boot1.pool.meta": "8388608",
			"boot1.thin.phase": "Ready", "boot1.thin.lv": "thin:thin:pool0:volumed:thin"})
		expectKV(t, r2, map[string]string{"boot2.thin.phase": "Ready"})
	})
	t.Run("CrashBetweenPVCreateAndVGCreate", func(t *testing.T) {
		expectKV(t, r1, map[string]string{"boot1.pv.VGB": "vgsel:" + vgselUUID("VGB") + ":4194304"})
	})
	t.Run("NeverTouched", func(t *testing.T) {
		if got := r1.KV("boot1.pv.VGDATA") + r2.KV("boot2.pv.VGDATA"); got != "" {
			t.Errorf("the disk holding data became a PV: %q", got)
		}
		b, err := os.ReadFile(dataDisk)
		if err != nil || !bytes.Equal(b[:len(dataPattern)], dataPattern) {
			t.Errorf("the disk holding data was written (%v)", err)
		}
		want := "vgforeign:" + r1.KV("foreign.pvuuid") + ":"
		for _, got := range []string{r1.KV("boot1.pv.VGFOREIGN"), r2.KV("boot2.pv.VGFOREIGN")} {
			if r1.KV("foreign.pvuuid") == "" || !strings.HasPrefix(got, want) {
				t.Errorf("the foreign PV is %q, want %s…", got, want)
			}
		}
		if got := r1.KV("boot1.data.note"); !strings.Contains(got, "never touched") {
			t.Errorf("volume data's note is %q, want it to name the disks it left alone", got)
		}
	})
	t.Run("Adopt", func(t *testing.T) {
		expectKV(t, r1, map[string]string{"boot1.adopt.phase": "Ready", "boot1.adopt.fsuuid": foreignUUID,
			"boot1.foreign.tags": "", "boot1.foreign.lvs": "fl,"})
		if got := r1.KV("boot1.adopt.note"); !strings.Contains(got, "adopted read-only") {
			t.Errorf("volume adopt's note is %q, want it to say the VG is adopted read-only", got)
		}
	})
}

// checkSecondBoot: the reboot, a disk attached at boot and one hot-added.
func checkSecondBoot(t *testing.T, r1, r2 *Run) {
	t.Run("Reboot", func(t *testing.T) {
		r2.CheckGuest(t)
		if got := r2.KV("prep.data.active"); got != "" {
			t.Errorf("before volumed started, vgsel/data was %q, want inactive (vgcreate --setautoactivation n)", got)
		}
		for _, k := range []string{"data.fsuuid", "data.lvuuid", "sum"} {
			if a, b := r1.KV("boot1."+k), r2.KV("boot2."+k); a == "" || a != b {
				t.Errorf("%s: %q before the reboot, %q after", k, a, b)
			}
		}
		expectKV(t, r2, map[string]string{"boot2.data.phase": "Ready", "boot2.pv.VGA": "vgsel:" + vgselUUID("VGA") + ":1048576",
			"boot2.pv.VGB": "vgsel:" + vgselUUID("VGB") + ":4194304"})
	})
	t.Run("GrowWithANewDisk", func(t *testing.T) {
		expectKV(t, r2, map[string]string{"boot2.vg.pvcount": "3", "boot2.pv.VGC": "vgsel:" + vgselUUID("VGC") + ":1048576"})
	})
	t.Run("AHotAddedDiskJoinsAReadyVolume", func(t *testing.T) {
		// Before the manifest asks for more: the disk's uevent alone.
		expectKV(t, r2, map[string]string{"joined.pvcount": "4", "joined.lvsize": r2.KV("boot2.data.size"), "joined.phase": "Ready"})
	})
	t.Run("GrowWithAHotAddedDisk", func(t *testing.T) {
		expectKV(t, r2, map[string]string{"grow.pvcount": "4", "grow.lvsize": fmt.Sprint(800 << 20), "grow.phase": "Ready", "grow.sum": r1.KV("boot1.sum")})
		vg, u, _ := strings.Cut(r2.KV("grow.pv"), ":")
		if vg != "vgsel" || !lvmdrv.OursFor("vgsel", u) {
			t.Errorf("the hot-added disk is PV %q, want one volumed made in vgsel", r2.KV("grow.pv"))
		}
		a, err1 := strconv.ParseInt(r2.KV("grow.fsbefore"), 10, 64)
		b, err2 := strconv.ParseInt(r2.KV("grow.fsafter"), 10, 64)
		if err1 != nil || err2 != nil || b <= a {
			t.Errorf("the filesystem was %q bytes before, %q after: want it grown", r2.KV("grow.fsbefore"), r2.KV("grow.fsafter"))
		}
	})
}

// hotAdd attaches a blank 256 MiB SCSI disk of that serial to the running
// machine through qemu's monitor.
func hotAdd(t *testing.T, r *Run, dir, serial string) {
	t.Helper()
	p := filepath.Join(dir, "hot-"+serial+".img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 256<<20); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{
		"drive_add 0 file=" + p + ",if=none,id=hot" + serial + ",format=raw",
		"device_add scsi-hd,bus=scsi0.0,drive=hot" + serial + ",serial=" + serial + ",id=hotdisk" + serial,
	} {
		out, err := r.Monitor(cmd)
		if err != nil || strings.Contains(strings.ToLower(out), "error") {
			t.Fatalf("monitor %q: %q, %v", cmd, out, err)
		}
	}
}

package ostest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holdScript makes the dm table ostest-hold over the disk whose serial
// is HELD, before volumed starts: something outside volumed holds the
// disk a volume selects. /sys/block, not udev's links: the disk is there
// (virtio_blk probed it in the initramfs) before udev has run.
const holdScript = `#!/bin/sh
modprobe dm_mod
for d in /sys/block/vd*; do
	[ "$(cat "$d/serial" 2>/dev/null)" = HELD ] || continue
	dev=/dev/${d##*/}
	exec dmsetup create ostest-hold --table "0 $(blockdev --getsz $dev) linear $dev 0"
done
echo "no disk with serial HELD" >&2
exit 1
`

// TestWipeInUse is issue 22's real-OS test of what is in use, with the
// guest's device-mapper, LVM and LUKS (the host's kernel has no dm), in
// one boot:
//
//   - a disk volume whose disk a dm table holds (made before volumed
//     starts) is refused at attach with the InUse condition naming the
//     holder, and is never formatted; once the table is removed, the
//     volume comes up by itself, retried at the removal's uevent;
//   - `volumed wipe --yes` refuses a disk an active LVM volume group is
//     on, and one with an open LUKS mapping, naming the holder, and
//     leaves every byte (the disk's and the LV's or mapping's sha256 are
//     the same, the LV still active, the LUKS header still there);
//   - after vgchange -an / cryptsetup close, `volumed wipe --yes`
//     succeeds and the disk is blank by the rule: `volumed disks` picks it
//     for a selector asking for a blank disk, and blkid finds nothing.
func TestWipeInUse(t *testing.T) {
	t.Parallel()
	img := Base(t)
	m := img.NewMachine(t, "wipe")
	for _, d := range []string{"HELD", "WIPELVM", "WIPELUKS"} {
		m.AddDisk(d, 64<<20)
	}
	m.AddFile("/etc/volumed/volumes.d/held.yaml", 0o644, `apiVersion: volumed/v1
kind: Volume
metadata: {name: held}
spec:
  source:
    disk: {match: 'disk.serial == "HELD"'}
  filesystem: {type: ext4}
  mounts: [{path: /srv/held}]
`)
	m.AddFile("/usr/lib/ostest/hold.sh", 0o755, holdScript)
	m.AddUnit("ostest-hold.service", `[Unit]
Description=ostest: a dm table over the disk HELD, outside volumed
DefaultDependencies=no
After=local-fs.target
Before=volumed.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/ostest/hold.sh
`, "sysinit.target")
	script, err := os.ReadFile(filepath.Join("testdata", "wipe.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m.AddTest("wipe", "", string(script))
	r := m.Boot(context.Background())
	r.Finish(t, "wipe", bootTimeout+6*time.Minute)
	r.CheckGuest(t)
	t.Logf("held: %q; lvm: %q; luks: %q", r.KV("held.inuse"), r.KV("lvm.refused.says"), r.KV("luks.refused.says"))

	t.Run("HeldAtAttach", func(t *testing.T) {
		if got := r.KV("held.inuse"); !strings.HasPrefix(got, "InUseOutsideVolumed: ") || !strings.Contains(got, "held by dm-") || !strings.Contains(got, "ostest-hold") {
			t.Errorf("volume held's InUse condition is %q, want reason InUseOutsideVolumed naming the holder (dm-N, ostest-hold)", got)
		}
		if got := r.KV("held.phase"); got == "Ready" {
			t.Errorf("volume held is Ready on a disk dm holds")
		}
		if got := r.KV("held.mounted"); got != "no" {
			t.Errorf("/srv/held mounted while its disk is held: %q", got)
		}
		if got := r.KV("held.signature"); got != "" {
			t.Errorf("the held disk was written: blkid finds %q on it", got)
		}
		if got, fs := r.KV("held.after.phase"), r.KV("held.after.fstype"); got != "Ready" || fs != "ext4" {
			t.Errorf("after the dm table was removed volume held is %q with /srv/held %q, want Ready and ext4", got, fs)
		}
		if got := r.KV("held.woken"); got == "0" || got == "" {
			t.Errorf("the removal of the dm table did not retry volume held at once (the agent's log says so %q times): it waited out its backoff", got)
		}
	})
	for _, c := range []struct{ name, holder, data, alive string }{
		{"lvm", "vgwipe-lv0", "lvm.lv.same", "lvm.lv.active"},
		{"luks", "ostest-crypt", "luks.map.same", "luks.header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			says := r.KV(c.name + ".refused.says")
			if rc := r.KV(c.name + ".refused.rc"); rc == "0" || rc == "" {
				t.Errorf("volumed wipe --yes of the held disk exited %q: %s", rc, says)
			}
			if !strings.Contains(says, "refused") || !strings.Contains(says, "held by dm-") || !strings.Contains(says, c.holder) {
				t.Errorf("the refusal says %q; want it refused naming the holder (dm-N, %s)", says, c.holder)
			}
			if got := r.KV(c.name + ".disk.same"); got != "yes" {
				t.Errorf("the disk's bytes changed across the refused wipe: %q", got)
			}
			if got := r.KV(c.data); got != "yes" {
				t.Errorf("the data through %s changed across the refused wipe: %q", c.holder, got)
			}
			if got := r.KV(c.alive); got != "active" && got != "yes" {
				t.Errorf("%s is not in place after the refused wipe: %s = %q", c.holder, c.alive, got)
			}
			if rc := r.KV(c.name + ".wiped.rc"); rc != "0" {
				t.Errorf("volumed wipe --yes after the holder went exited %q, want 0", rc)
			}
			if got := r.KV(c.name + ".blank"); got != "yes" {
				t.Errorf("after the wipe, volumed disks does not pick the disk as blank: %q", got)
			}
			if got := r.KV(c.name + ".after.signature"); got != "" {
				t.Errorf("after the wipe blkid still finds %q", got)
			}
		})
	}
	if got := r.KV("lvm.after.vg"); got != "" {
		t.Errorf("LVM still sees VG %q after the wipe", got)
	}
}

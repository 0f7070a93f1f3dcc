package ostest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sharedUUID is the filesystem on the LV volumed did not create.
const sharedUUID = "5d0c8a62-5b0e-4c0e-9a53-1f1b7a2c4e11"

// vgLater runs before volumed at every boot after the first: it
// deactivates the VG (the initramfs activated it) and says what is
// active before volumed starts.
const vgLater = `	# Debian's initramfs activates every complete VG (its own copy of
	# lvm.conf, lvm2's udev rules); the root's lvmlocal.conf keeps the
	# coldplug from doing it again. Deactivated here, the LVs are as a
	# host that does not autoactivate leaves them.
	kv initramfs.data "$(lvs --noheadings --separator : -o lv_name,lv_active vgtest/data 2>&1 | tr -d ' ')"
	check "vgchange -an vgtest" vgchange -q -an vgtest
	kv before.data "$(lvs --noheadings --separator : -o lv_name,lv_active vgtest/data 2>&1 | tr -d ' ')"
	kv before.shared "$(lvs --noheadings --separator : -o lv_name,lv_active vgtest/shared 2>&1 | tr -d ' ')"`

// vgFirst makes, at the first boot, the VG vgtest on the disk LVMPV and
// the foreign LV shared in it, with ext4.
const vgFirst = `dev=$(serial_disk LVMPV) || exit 1
check pvcreate pvcreate -q "$dev"
check vgcreate vgcreate -q vgtest "$dev"
check "lvcreate shared" lvcreate -q -y -n shared -L 16M vgtest
check "mkfs shared" mkfs.ext4 -q -U ` + sharedUUID + ` /dev/mapper/vgtest-shared
# What a crash of volumed between lvcreate's metadata commit and its
# activation leaves (and no record: the state file has none yet): the
# LV with the volume's tag, inactive.
check "lvcreate half" lvcreate -q -y -n half -L 16M --addtag volumed:half vgtest
check "lvchange -an half" lvchange -q -an vgtest/half
kv half.made "$(lvs --noheadings -o lv_uuid vgtest/half | tr -d ' ')"`

// TestLVM is the first slice of issue 24 on a real Debian 12 (this
// host's kernel has no device-mapper), two boots of one machine:
//
//   - an lvm volume in an existing VG: volumed creates its LV (linear,
//     the size asked, tagged volumed:data), formats and mounts it;
//   - a reboot with the host's LVM activating nothing (lvmlocal.conf,
//     and the VG deactivated before volumed starts, as Debian's
//     initramfs activates it with its own lvm.conf): the LV is inactive,
//     volumed activates it and mounts the same filesystem with the same
//     data, creating no second LV;
//   - an LV with a volume's tag, inactive, as a crash between lvcreate and
//     its record leaves it: found by the tag, activated, made Ready, never
//     created again;
//   - an LV volumed did not create, named by a manifest, is used as it is
//     (its filesystem kept, no tag added); inactive after the reboot, the
//     volume waits saying why, the LV left inactive, until the operator
//     activates it;
//   - removing the manifest unmounts the volume and deactivates its LV,
//     which stays with its tag.
func TestLVM(t *testing.T) {
	t.Parallel()
	m := Base(t).NewMachine(t, "lvm")
	m.AddDisk("LVMPV", 256<<20)
	m.AddFile("/etc/lvm/lvmlocal.conf", 0o644, "activation {\n\tauto_activation_volume_list = []\n}\n")
	addVGSetup(m, "vg", "the VG vgtest", vgFirst, vgLater)
	addLVMVolume(m, "data", "volumeGroup: vgtest, size: 64Mi", "type: ext4")
	addLVMVolume(m, "half", "volumeGroup: vgtest, size: 16Mi", "type: ext4")
	addLVMVolume(m, "ext", "volumeGroup: vgtest, name: shared, size: 16Mi", "type: ext4")
	script, err := os.ReadFile(filepath.Join("testdata", "lvm.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m.AddTest("lvm", "Wants=volumed-wait@data.service\nAfter=volumed-wait@data.service", string(script))
	ctx := context.Background()

	r1 := m.Boot(ctx)
	r1.WaitDone(t, "boot1", bootTimeout)
	r1.Wait(t, shutdownTimeout)
	t.Run("Create", func(t *testing.T) {
		r1.CheckGuest(t)
		want := map[string]string{
			"boot1.data.phase": "Ready", "boot1.data.fstype": "ext4", "boot1.data.samedev": "yes",
			"boot1.data.tags": "volumed:data", "boot1.data.segtype": "linear", "boot1.data.size": "67108864",
			"boot1.lvs": "data,half,shared,",
		}
		for k, v := range want {
			if got := r1.KV(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
	})
	t.Run("HalfDone", func(t *testing.T) {
		made := r1.KV("half.made")
		if got := r1.KV("boot1.half.lvuuid"); made == "" || got != made {
			t.Errorf("volume half's LV is %q, want the one a crash left (tagged, inactive) %q: found by its tag, never made again", got, made)
		}
		if got := r1.KV("boot1.half.phase"); got != "Ready" {
			t.Errorf("volume half is %q, want Ready", got)
		}
	})
	t.Run("Foreign", func(t *testing.T) {
		want := map[string]string{
			"boot1.ext.phase": "Ready", "boot1.ext.fsuuid": sharedUUID, "boot1.ext.samedev": "yes", "boot1.ext.tags": "",
		}
		for k, v := range want {
			if got := r1.KV(k); got != v {
				t.Errorf("%s = %q, want %q (the LV volumed did not create is used as it is)", k, got, v)
			}
		}
	})

	r2 := m.Boot(ctx)
	r2.WaitDone(t, "boot2", bootTimeout)
	r2.Wait(t, shutdownTimeout)
	t.Run("Reboot", func(t *testing.T) {
		r2.CheckGuest(t)
		if got := r2.KV("before.data"); got != "data:" {
			t.Errorf("before volumed started the LV data was %q, want data: (inactive): the test shows nothing of volumed's activation", got)
		}
		for _, k := range []string{"data.fsuuid", "data.lvuuid"} {
			if u1, u2 := r1.KV("boot1."+k), r2.KV("boot2."+k); u1 == "" || u1 != u2 {
				t.Errorf("%s: %q before the reboot, %q after (formatted or created again)", k, u1, u2)
			}
		}
		if s1, s2 := r1.KV("boot1.sum"), r2.KV("boot2.sum"); s1 == "" || s1 != s2 {
			t.Errorf("payload sha256 %q before the reboot, %q after", s1, s2)
		}
		for k, v := range map[string]string{"boot2.data.phase": "Ready", "boot2.data.samedev": "yes", "boot2.data.tags": "volumed:data", "boot2.lvs": "data,half,shared,"} {
			if got := r2.KV(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
	})
	t.Run("ForeignInactive", func(t *testing.T) {
		if got := r2.KV("before.shared"); got != "shared:" {
			t.Errorf("before volumed started the LV shared was %q, want shared: (inactive)", got)
		}
		if got := r2.KV("boot2.ext.phase"); got == "Ready" {
			t.Errorf("volume ext is Ready on an inactive LV")
		}
		if got := r2.KV("boot2.ext.error"); !strings.Contains(got, "vgtest/shared") || !strings.Contains(got, "never activates") {
			t.Errorf("volume ext's error is %q, want it to name vgtest/shared and say volumed never activates it", got)
		}
		if got := r2.KV("boot2.ext.active"); got != "" {
			t.Errorf("volumed activated the LV it did not create: lv_active %q", got)
		}
		if got := r2.KV("boot2.ext.tags"); got != "" {
			t.Errorf("volumed tagged the LV it did not create: %q", got)
		}
		if got, u := r2.KV("boot2.ext.after"), r2.KV("boot2.ext.fsuuid"); got != "Ready" || u != sharedUUID {
			t.Errorf("once activated by hand, volume ext is %q with filesystem %q, want Ready with %s", got, u, sharedUUID)
		}
	})
	t.Run("Teardown", func(t *testing.T) {
		if got := r2.KV("teardown.lv"); got != "data::volumed:data" {
			t.Errorf("after its manifest went, the LV data is %q, want it kept, inactive, tagged (data::volumed:data)", got)
		}
	})
}

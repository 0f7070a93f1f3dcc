package ostest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Issue 21, scenario 6: real I/O faults under a real boot, from the
// kernel's device mapper (dm-flakey, dm-delay) in the guest. A fault is
// switched on and off by swapping a mapping's table, so each test says
// exactly when the disk is bad.

// faultLib is shell for the fault tests' guest scripts.
const faultLib = `
# dm_swap NAME TABLE: replace a mapping's table. --nolockfs: freezing the
# filesystem first would write through the very fault being switched.
dm_swap() { dmsetup suspend --nolockfs "$1" && dmsetup load "$1" --table "$2" && dmsetup resume "$1"; }
# dm_make NAME SERIAL: a linear mapping over the whole virtio disk SERIAL.
dm_make() {
	wait_until 60 test -b "/dev/disk/by-id/virtio-$2" || { fail "no disk $2"; return 1; }
	dev=$(readlink -f "/dev/disk/by-id/virtio-$2")
	sectors=$(blockdev --getsz "$dev")
	dmsetup create "$1" --table "0 $sectors linear $dev 0"
	eval "dev_$1=$dev sectors_$1=$sectors"
}
linear() { eval "echo 0 \$sectors_$1 linear \$dev_$1 0"; }
# flakey NAME [FEATURES...]: always down (up 0 s, down 3600 s); with no
# feature every read and write fails, with drop_writes writes are
# acknowledged and dropped.
flakey() {
	n=$1; shift
	if [ $# -gt 0 ]; then f=" $# $*"; else f=""; fi
	eval "echo 0 \$sectors_$n flakey \$dev_$n 0 0 3600$f"
}
delay() { eval "echo 0 \$sectors_$1 delay \$dev_$1 0 $2"; }
status_json() { volumed status -o json "$@" 2>&1; }
has_cond() { status_json "$1" | grep -q "\"type\": \"$2\""; }
# timed CMD...: runs CMD, prints its wall time in ms to stdout (CMD's own
# output goes to /tmp/timed.out). The clock is /proc/uptime (10 ms), read
# by the shell: two date processes cost more than the call they timed.
timed() {
	local s e
	read -r s _ </proc/uptime
	"$@" >/tmp/timed.out 2>&1
	rc=$?
	read -r e _ </proc/uptime
	echo $(( (${e%.*}${e#*.} - ${s%.*}${s#*.}) * 10 ))
	return $rc
}
fs_uuid() { blkid -p -s UUID -o value "$1"; }
# line_with FILE TEXT: the first line of FILE that contains TEXT, false if
# none: grep -m1 read by the shell (a process is ~0.2 s of emulated CPU,
# and the loops that time volumed status read its output every second).
line_with() {
	while IFS= read -r l; do
		case $l in *"$2"*) printf '%s\n' "$l"; return 0 ;; esac
	done <"$1"
	return 1
}
# uptime_s: whole seconds of uptime, read by the shell.
uptime_s() { local up; read -r up _ </proc/uptime; echo "${up%.*}"; }
`

// faultMachine is a machine of the base image with faultLib in it.
func faultMachine(t *testing.T, name string) *Machine {
	m := Base(t).NewMachine(t, name)
	m.AddFile("/usr/lib/ostest/faults.sh", 0o644, faultLib)
	return m
}

// faultDropIn makes the agent's drift check (which reads the kernel's
// verdict on a filesystem) run every 3 s instead of every minute.
const faultDropIn = `[Service]
ExecStart=
ExecStart=/usr/bin/volumed run --resync 3s
`

func deviceManifest(name, dev, mnt string) string {
	return fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source:
    device: {path: %s}
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, name, dev, mnt)
}

// TestFlakeyDataVolume: a volume's disk fails every read and write, later
// drops every write. The operator sees FilesystemError; the agent does not
// crash, and the volume is never formatted again: after the disk heals
// and the machine reboots, the filesystem is the same and what was
// written before the fault is there.
func TestFlakeyDataVolume(t *testing.T) {
	t.Parallel()
	m := faultMachine(t, "flakey-data")
	m.AddDisk("FLAKY1", 64<<20)
	m.AddDisk("DROP1", 64<<20)
	m.AddFile("/etc/systemd/system/volumed.service.d/resync.conf", 0o644, faultDropIn)
	m.AddFile("/etc/volumed/volumes.d/flaky.yaml", 0o644, deviceManifest("flaky", "/dev/mapper/flaky", "/srv/flaky"))
	m.AddFile("/etc/volumed/volumes.d/drop.yaml", 0o644, deviceManifest("drop", "/dev/mapper/drop", "/srv/drop"))
	m.AddTest("flakey", "", flakeyDataScript)
	ctx := context.Background()

	r := m.Boot(ctx)
	r.WaitDone(t, "flakey-first", 8*time.Minute)
	r.Wait(t, 3*time.Minute)
	r.CheckGuest(t)
	for _, k := range []string{"uuid", "sum", "agent", "drop.uuid"} {
		if r.KV(k) == "" {
			t.Fatalf("the first boot reported no %s", k)
		}
	}
	if got := r.KV("errors.cond"); got != "FilesystemError" {
		t.Errorf("with every read and write failing, the volume's condition was %q, want FilesystemError", got)
	}
	// Dropped writes are acknowledged: only what the kernel then finds
	// (ext4's checks on what it reads back) can show, and the test
	// reports what it was.
	t.Logf("dropped writes: condition %s, ext4 errors %s", r.KV("drop.cond"), r.KV("drop.errors"))

	r2 := m.Boot(ctx)
	r2.Finish(t, "flakey-second", 5*time.Minute)
	r2.CheckGuest(t)
	if a, b := r.KV("uuid"), r2.KV("uuid"); a != b {
		t.Errorf("the volume's filesystem UUID went from %s to %s: it was formatted again", a, b)
	}
	if a, b := r.KV("drop.uuid"), r2.KV("drop.uuid"); a != b {
		t.Errorf("the volume under dropped writes: filesystem UUID %s, after the reboot %s: formatted again", a, b)
	}
	if a, b := r.KV("sum"), r2.KV("sum"); a != b {
		t.Errorf("the file written and synced before the fault: sha256 %s, after the reboot %s", a, b)
	}
}

const flakeyDataScript = `. /usr/lib/ostest/faults.sh
dm_make flaky FLAKY1 || exit 0
dm_make drop DROP1 || exit 0
if [ -e /var/lib/ostest/flakey-first ]; then
	check "volumes Ready after the reboot" volumed wait flaky drop --timeout 3m
	kv uuid "$(fs_uuid /dev/mapper/flaky)"
	kv drop.uuid "$(fs_uuid /dev/mapper/drop)"
	formats=$(status_json flaky drop | grep -c '"op": "format"')
	[ "$formats" = 0 ] || fail "after the reboot, $formats format operations: $(status_json flaky drop | grep -B1 -A3 '"op": "format"')"
	kv sum "$(sha256sum /srv/flaky/before | cut -d' ' -f1)"
	journalctl -b -1 -u volumed.service | grep -i "mkfs\|format" | while read -r l; do log "last boot: $l"; done
	done_step flakey-second
	exit 0
fi
check "volumes Ready" volumed wait flaky drop --timeout 5m
kv uuid "$(fs_uuid /dev/mapper/flaky)"
kv drop.uuid "$(fs_uuid /dev/mapper/drop)"
head -c 1M /dev/urandom >/srv/flaky/before && sync
kv sum "$(sha256sum /srv/flaky/before | cut -d' ' -f1)"
agent=$(agent_id)
kv agent "$agent"

# Every read and write fails.
dm_swap flaky "$(flakey flaky)"
echo 1 >/proc/sys/vm/drop_caches
head -c 1M /dev/urandom >/srv/flaky/during 2>/dev/null; sync
ls -R /srv/flaky >/dev/null 2>&1
if wait_until 60 has_cond flaky FilesystemError; then
	kv errors.cond FilesystemError
else
	fail "no FilesystemError 60 s into read and write errors: $(status_json flaky | tr -d '\n' | head -c 1500)"
fi
log_cmd volumed status flaky
log "the kernel's view: $(findmnt -no OPTIONS /srv/flaky), super $(grep ' /srv/flaky ' /proc/self/mountinfo | awk '{print $NF}')"

# Another volume's writes are acknowledged and dropped: files are
# written and synced, the caches dropped, and everything read back.
dm_swap drop "$(flakey drop drop_writes)"
for i in 1 2 3; do
	mkdir -p /srv/drop/d$i && head -c 256K /dev/urandom >/srv/drop/d$i/f && sync
	echo 3 >/proc/sys/vm/drop_caches
	ls -lR /srv/drop >/dev/null 2>&1; cat /srv/drop/d*/f >/dev/null 2>&1
done
if wait_until 30 has_cond drop FilesystemError; then kv drop.cond FilesystemError; else kv drop.cond none; fi
kv drop.errors "$(cat /sys/fs/ext4/$(basename "$(readlink -f /dev/mapper/drop)")/errors_count 2>&1)"
log_cmd volumed status drop
dm_swap drop "$(linear drop)"
[ "$(agent_id)" = "$agent" ] || fail "the agent restarted under the faults: $agent, now $(agent_id)"

# Healed. The filesystem stays as the kernel left it until the operator
# acts; the agent must not have formatted anything.
dm_swap flaky "$(linear flaky)"
sleep 5
# One format each, at first sight of the blank disk; none since.
for v in flaky drop; do
	n=$(status_json $v | grep -c '"op": "format"')
	[ "$n" -le 1 ] || fail "$v: $n format operations in its last 20 events, want at most the first one: $(status_json $v | grep -A3 '"op": "format"')"
done
[ "$(agent_id)" = "$agent" ] || fail "the agent restarted: $agent, now $(agent_id)"
mkdir -p /var/lib/ostest; touch /var/lib/ostest/flakey-first; sync
done_step flakey-first
systemctl reboot
`

package ostest

import (
	"context"
	"testing"
	"time"
)

// TestFlakeyStateDirectory: the filesystem of the state directory fails
// every read and write while volumes change. The volumes whose outcome
// could not be written say StateNotRecorded; once the disk heals the
// state catches up, the agent restarted and the machine rebooted find
// every volume where it was left, and nothing is formatted again.
func TestFlakeyStateDirectory(t *testing.T) {
	t.Parallel()
	m := faultMachine(t, "flakey-state")
	m.AddDisk("STATE1", 64<<20)
	m.AddFile("/usr/lib/ostest/statedir.sh", 0o755, stateDirSetup)
	m.AddUnit("ostest-statedir.service", stateDirUnit, "sysinit.target")
	for _, n := range []string{"a", "b"} {
		m.AddFile("/etc/volumed/volumes.d/"+n+".yaml", 0o644, loopManifest(n, "/srv/"+n))
	}
	m.AddTest("statefault", "Wants=volumed-wait@a.service\nAfter=volumed-wait@a.service", stateFaultScript)
	ctx := context.Background()

	r := m.Boot(ctx)
	r.WaitDone(t, "state-first", 8*time.Minute)
	r.Wait(t, 3*time.Minute)
	r.CheckGuest(t)
	t.Logf("under the fault: %s; status answered in at most %s ms", r.KV("notrecorded.says"), r.KV("status.max"))
	if r.KV("notrecorded") == "" {
		t.Errorf("no volume said StateNotRecorded while the state directory's disk failed")
	}

	r2 := m.Boot(ctx)
	r2.Finish(t, "state-second", 5*time.Minute)
	r2.CheckGuest(t)
	for _, k := range []string{"uuid.a", "uuid.c", "sum.a"} {
		if a, b := r.KV(k), r2.KV(k); a == "" || a != b {
			t.Errorf("%s: %q before the reboot, %q after", k, a, b)
		}
	}
}

// The state directory on its own filesystem, on a mapping the test can
// fail: ext4 without a journal, errors=continue, so that the filesystem
// stays writable once its disk heals (a journal would abort on the
// first failed write and keep it read-only until fsck, which tests ext4,
// not volumed).
const stateDirUnit = `[Unit]
Description=ostest: the state directory on a dm mapping
DefaultDependencies=no
After=systemd-udevd.service systemd-udev-trigger.service local-fs.target
Before=volumed.service sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/ostest/statedir.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
`

const stateDirSetup = `#!/bin/sh
. /usr/lib/ostest/lib.sh
. /usr/lib/ostest/faults.sh
dm_make statedm STATE1 || exit 1
if ! blkid -p /dev/mapper/statedm >/dev/null 2>&1; then
	mkfs.ext4 -q -O ^has_journal /dev/mapper/statedm
fi
mkdir -p /var/lib/volumed
mount -o errors=continue /dev/mapper/statedm /var/lib/volumed
`

const stateFaultScript = `. /usr/lib/ostest/faults.sh
dev_statedm=$(dmsetup table statedm | cut -d' ' -f4); sectors_statedm=$(blockdev --getsz /dev/mapper/statedm)
dev_statedm=$(readlink -f /dev/block/$dev_statedm)
if [ -e /srv/a/before ] && [ -e /var/lib/ostest/state-first ]; then
	check "volumes Ready after the reboot" volumed wait a c --timeout 3m
	findmnt /srv/b >/dev/null && fail "b, removed under the fault, is mounted again after the reboot"
	kv uuid.a "$(fs_uuid "$(findmnt -no SOURCE /srv/a)")"
	kv uuid.c "$(fs_uuid "$(findmnt -no SOURCE /srv/c)")"
	kv sum.a "$(sha256sum /srv/a/before | cut -d' ' -f1)"
	volumed status | grep -q "WARNING" && fail "status warns after the reboot: $(volumed status | tail -n 3)"
	done_step state-second
	exit 0
fi
check "b Ready" volumed wait b --timeout 3m
head -c 1M /dev/urandom >/srv/a/before && sync
kv uuid.a "$(fs_uuid "$(findmnt -no SOURCE /srv/a)")"
kv sum.a "$(sha256sum /srv/a/before | cut -d' ' -f1)"
agent=$(agent_id)

# The state directory's disk fails every read and write; b is removed
# and c added meanwhile.
sync
dm_swap statedm "$(flakey statedm)"
rm /etc/volumed/volumes.d/b.yaml
sed 's/\ba\b/c/g' /etc/volumed/volumes.d/a.yaml >/etc/volumed/volumes.d/c.yaml
seen=""
end=$(( $(uptime_s) + 60 ))
while [ "$(uptime_s)" -lt $end ]; do
	ms=$(timed volumed status -o json) || fail "status failed under the fault: $(cat /tmp/timed.out | head -c 500)"
	[ "$ms" -lt 5000 ] || fail "volumed status took $ms ms while the state directory failed"
	[ "$ms" -gt "${max:-0}" ] && max=$ms
	if line_with /tmp/timed.out '"StateNotRecorded"' >/dev/null; then
		seen=yes
		kv notrecorded.says "$(grep -A2 '"StateNotRecorded"' /tmp/timed.out | grep message | head -n 1 | tr ' ' '_' | head -c 300)"
		break
	fi
	sleep 1
done
if [ -n "$seen" ]; then kv notrecorded yes; fi
kv status.max "${max:-0}"
log_cmd volumed status
log_cmd journalctl -b -u volumed.service --no-pager -o short-monotonic
[ "$(agent_id)" = "$agent" ] || fail "the agent restarted under the fault: $agent, now $(agent_id)"

# Healed: the outcomes are written, the work goes on.
dm_swap statedm "$(linear statedm)"
check "c Ready once the state directory healed" volumed wait c --timeout 3m
wait_until 60 sh -c '! volumed status -o json | grep -q StateNotRecorded' || fail "StateNotRecorded 60 s after the disk healed: $(volumed status)"
wait_until 60 sh -c '! findmnt /srv/b >/dev/null' || fail "b still mounted 60 s after the disk healed"
kv uuid.c "$(fs_uuid "$(findmnt -no SOURCE /srv/c)")"
# A restarted agent reads the state file the fault interrupted.
systemctl restart volumed
check "volumes Ready after a restart" volumed wait a c --timeout 2m
volumed status | grep -q "WARNING" && fail "status warns after the restart: $(volumed status | tail -n 3)"
journalctl -b -u volumed.service | grep -i "mkfs\|damaged" | while read -r l; do log "journal: $l"; done
mkdir -p /var/lib/ostest; touch /var/lib/ostest/state-first; sync
done_step state-first
systemctl reboot
`

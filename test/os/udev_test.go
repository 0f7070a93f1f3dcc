package ostest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// Issue 21, scenario 7: the real systemd-udevd probes every device volumed
// makes (a loop device, a dm-crypt mapping) and re-probes it when a
// writer closes it (the watch rule) while the agent attaches, formats,
// mounts, unmounts and detaches. The test brings volumes up and takes
// them down three times over, and checks what an operator would: every
// volume converges (a busy device is retried, never a failure that
// stays), /dev/disk/by-uuid points at each volume's filesystem, nothing
// is left behind (loop devices, mappings), and systemd made no unit of
// its own (a cryptsetup unit, a generated mount) for a device volumed
// manages.
func TestUdevInTheLoop(t *testing.T) {
	t.Parallel()
	m := Base(t).NewMachine(t, "udev")
	names := []string{"u1", "u2", "u3", "u4"}
	for _, n := range names {
		m.AddFile("/etc/volumed/volumes.d/"+n+".yaml", 0o644, loopManifest(n, "/srv/"+n))
	}
	m.AddFile("/etc/volumed/secrets/uc.key", 0o600, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	m.AddFile("/etc/volumed/volumes.d/uc.yaml", 0o644, encryptedManifest("uc", "/srv/uc"))
	m.AddTest("udev", "Wants=volumed-wait@u1.service\nAfter=volumed-wait@u1.service", udevScript)
	r := m.Boot(context.Background())
	r.Finish(t, "udev", 12*time.Minute)
	r.CheckGuest(t)
	rounds, _ := strconv.Atoi(r.KV("rounds"))
	if rounds != 3 {
		t.Errorf("the guest finished %d rounds of teardown and setup, want 3", rounds)
	}
	t.Logf("%s rounds; busy errors retried: %s; by-uuid links checked: %s", r.KV("rounds"), r.KV("busy"), r.KV("links"))
}

func encryptedManifest(name, mnt string) string {
	return fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source:
    loop: {file: /var/lib/ostest/%s.img, create: {size: 64Mi}}
  encryption:
    luks2:
      keys: [{file: /etc/volumed/secrets/%s.key}]
      pbkdf: pbkdf2
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, name, name, name, mnt)
}

const udevScript = `
all="u1 u2 u3 u4 uc"
cycled="u3 u4 uc"
links=0
# Under TCG every process is ~0.2 s of the guest's one CPU: what is read
# of many volumes is read once (findmnt, blkid, readlink, losetup).
# by_uuid: each volume's filesystem is where /dev/disk/by-uuid says: its
# UUID as blkid -p reads it off the device, the link as udev made it.
by_uuid() {
	udevadm settle -t 60 || fail "udev did not settle"
	vols=$*
	findmnt -rn -o TARGET,SOURCE >/run/ostest-mounts
	devs=""
	for v in $vols; do
		src=""
		while read -r mp s; do [ "$mp" = "/srv/$v" ] && src=$s; done </run/ostest-mounts
		[ -n "$src" ] || fail "$v: /srv/$v not mounted"
		eval "src_$v=\$src"
		devs="$devs $src"
	done
	# One blkid for all: DEVNAME= then UUID= of each device.
	blkid -p -o export $devs >/run/ostest-blkid 2>/dev/null
	paths=""
	for v in $vols; do
		eval "src=\$src_$v"
		dev="" uuid=""
		while IFS== read -r k val; do
			case $k in DEVNAME) dev=$val ;; UUID) [ -n "$src" ] && [ "$dev" = "$src" ] && uuid=$val ;; esac
		done </run/ostest-blkid
		eval "uuid_$v=\$uuid"
		paths="$paths /dev/disk/by-uuid/${uuid:-none} ${src:-none}"
	done
	# One readlink -m: a line for each path, there or not.
	set -- $(readlink -m $paths)
	for v in $vols; do
		eval "src=\$src_$v uuid=\$uuid_$v"
		if [ -n "$src" ]; then
			if [ -z "$uuid" ] || [ "$1" != "$2" ]; then
				fail "$v: /dev/disk/by-uuid/$uuid is $1, not $src ($2)"
			fi
			links=$((links + 1))
		fi
		shift 2
	done
}
# gone VOLUME...: neither mounted nor in the agent's status.
gone() {
	for v in "$@"; do mounted "/srv/$v" && return 1; done
	st=$(volumed status -o json)
	for v in "$@"; do
		case $st in *"\"name\": \"$v\""*) return 1 ;; esac
	done
	return 0
}
check "every volume Ready" volumed wait $all --timeout 5m
by_uuid $all
mkdir -p /root/held
round=0
while [ $round -lt 3 ]; do
	for v in $cycled; do mv "/etc/volumed/volumes.d/$v.yaml" /root/held/; done
	wait_until 180 gone $cycled || { fail "round $round: $cycled not torn down: $(volumed status)"; break; }
	# No loop device left on an image: one losetup for all.
	losetup -l -n -O BACK-FILE >/run/ostest-loops
	for v in $cycled; do
		while read -r f; do
			[ "$f" = "/var/lib/ostest/$v.img" ] && fail "round $round: a loop device is left on $v.img: $(losetup -j "/var/lib/ostest/$v.img")"
		done </run/ostest-loops
	done
	dmsetup info volumed-uc >/dev/null 2>&1 && fail "round $round: the mapping volumed-uc is left"
	for v in $cycled; do mv "/root/held/$v.yaml" /etc/volumed/volumes.d/; done
	check "round $round: Ready again" volumed wait $cycled --timeout 5m
	by_uuid $cycled
	round=$((round + 1))
done
kv rounds $round
kv links $links
journalctl -b -u volumed.service >/run/ostest-journal
busy=$(grep -ci "busy" /run/ostest-journal)
kv busy "$busy"
grep -i "busy" /run/ostest-journal | head -n 20 | while read -r l; do log "busy: $l"; done
# systemd's generators and rules must leave our devices alone: no
# cryptsetup unit for the mapping, no fstab mount for our paths.
units=$(systemctl list-units --all --no-legend --plain 'systemd-cryptsetup@*')
[ -z "$units" ] || fail "systemd made cryptsetup units: $units"
grep -q "/srv/u" /etc/fstab && fail "/etc/fstab names a volume's path"
check "every volume Ready at the end" volumed wait $all --timeout 1m
done_step udev
`

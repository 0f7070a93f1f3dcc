# Helpers for the VM scenarios (busybox sh). /init sources this file for
# vt_reset and vt_dump; each scenario runs in a fresh shell that sources
# it, calls vt_setup NAME, then sources scenarios/NAME.sh.
#
# A scenario calls `fail MESSAGE` on the first thing that is wrong (it
# exits the scenario's shell) and simply ends when all is well. Every
# wait is bounded. Functions that fail must not be called inside $(...),
# where `fail` would only leave the subshell.

VOLUMED=/usr/local/bin/volumed
# iproute2's ip, for veth and network namespaces. Busybox's sh prefers its
# own applets to PATH, and its ip has neither.
IP=/usr/local/sbin/ip
NVMET=/sys/kernel/config/nvmet
LIO=/sys/kernel/config/target
VT_RUN=/run/vmtest
# Extra `volumed run` flags and filesystem fields (", grow: true") for the
# manifests a scenario writes.
AGENT_ARGS=
FS_OPTS=

now() { cut -d' ' -f1 /proc/uptime; }
log() { echo "VMTEST-LOG [$(now)] $*"; }
fail() {
	local msg
	msg=$(echo "$*" | tr '\n' ' ')
	echo "$msg" > $VT_RUN/fail
	echo "VMTEST-FAIL [$(now)] $msg"
	exit 1
}
not() { ! "$@"; }

# wait_until SECS CMD...: runs CMD until it succeeds, every 0.2 s at
# first and then less often, up to every second; false if it has not after
# SECS. Under TCG a poll (volumed status, nvme list) costs the one
# emulated CPU that the work awaited needs.
wait_until() {
	local end pause=200000 up
	read -r up _ </proc/uptime
	end=$((${up%.*} + $1))
	shift
	while ! "$@"; do
		read -r up _ </proc/uptime
		[ "${up%.*}" -lt $end ] || return 1
		usleep $pause
		case $pause in 200000) pause=500000 ;; *) pause=1000000 ;; esac
	done
}

# vt_setup NAME: the scenario's own directories under /w/NAME.
vt_setup() {
	VT_NAME=$1
	VT_DIR=/w/$1
	CFG=$VT_DIR/volumes.d
	STATE=$VT_DIR/state
	SOCK=$VT_DIR/volumed.sock
	ALOG=$VT_DIR/agent.log
	MNT=$VT_DIR/mnt
	IMG=$VT_DIR/img
	AGENT_PID=
	mkdir -p $CFG $STATE $MNT $IMG && chmod 0755 /w $VT_DIR $CFG
}

# ---- the agent -------------------------------------------------------

# alive PID: the process exists and is not a zombie.
alive() { [ -r /proc/$1/stat ] && ! grep -q '^[0-9]* ([^)]*) Z' /proc/$1/stat 2>/dev/null; }

# bg_track PID: reset kills it if the scenario leaves it running.
bg_track() { echo $1 > $VT_RUN/pids/$1; }

# agent_start [VAR=value...]: starts `volumed run` in the background with
# that extra environment (e.g. VOLUMED_CRASH_AT=attach:after-kernel) and
# $AGENT_ARGS; output to $ALOG. Does not wait: see agent_ready.
agent_start() {
	[ -z "$AGENT_PID" ] || fail "agent_start: an agent (pid $AGENT_PID) is already running"
	echo "---- [$(now)] start $*" >> $ALOG
	env "$@" $VOLUMED run --config-dir $CFG --state-dir $STATE --socket $SOCK \
		--metrics-address 127.0.0.1:0 --log-format json $AGENT_ARGS >> $ALOG 2>&1 &
	AGENT_PID=$!
	bg_track $AGENT_PID
}

agent_answers() {
	$VOLUMED status --socket $SOCK >/dev/null 2>&1 && return 0
	alive $AGENT_PID || fail "the agent exited: $(tail -n 3 $ALOG)"
	return 1
}

# agent_ready [SECS]: waits until the agent answers on its socket.
agent_ready() {
	wait_until ${1:-30} agent_answers || fail "the agent did not answer on $SOCK within ${1:-30}s"
}

agent_up() { agent_start "$@" && agent_ready; }

agent_reaped() {
	wait $AGENT_PID
	AGENT_RC=$?
	rm -f $VT_RUN/pids/$AGENT_PID
	AGENT_PID=
}

# agent_stop: SIGTERM, as systemd stops it; volumes stay as they are.
agent_stop() {
	[ -n "$AGENT_PID" ] || return 0
	kill -TERM $AGENT_PID 2>/dev/null
	if ! wait_until 30 not alive $AGENT_PID; then
		kill -9 $AGENT_PID
		fail "the agent did not stop within 30s of SIGTERM"
	fi
	agent_reaped
}

# agent_kill: SIGKILL, a crash from outside.
agent_kill() {
	[ -n "$AGENT_PID" ] || return 0
	kill -9 $AGENT_PID 2>/dev/null
	agent_reaped
}

# agent_crashed [SECS]: waits for the agent to die at its crash point,
# which kills it with SIGKILL (exit status 137).
agent_crashed() {
	wait_until ${1:-60} not alive $AGENT_PID ||
		fail "the agent did not reach its crash point within ${1:-60}s: $(tail -n 3 $ALOG)"
	agent_reaped
	[ $AGENT_RC -eq 137 ] || fail "the agent exited with status $AGENT_RC, want 137 (SIGKILL at the crash point): $(tail -n 3 $ALOG)"
}

# ---- the agent's view ------------------------------------------------

vstatus() { $VOLUMED status --socket $SOCK -o json "$@"; }

# vfield NAME FIELD: a top-level scalar of the volume's JSON status
# (phase, device, capacityBytes, ...), quotes stripped.
vfield() {
	vstatus "$1" 2>/dev/null | sed -n "s/^    \"$2\": \(.*\)/\1/p" | head -n 1 | sed 's/,$//; s/^"//; s/"$//'
}

# ready SECS NAME...: volumed wait; fails the scenario with its reason.
ready() {
	local t=$1 out
	shift
	out=$($VOLUMED wait --socket $SOCK --timeout ${t}s "$@" 2>&1) || fail "not Ready within ${t}s: $out"
}

# gone NAME: the agent no longer lists the volume (it was torn down).
gone() { ! vstatus "$1" >/dev/null 2>&1; }

# ---- manifests -------------------------------------------------------

# manifest NAME SOURCE: writes $CFG/NAME.yaml atomically (root, 0644):
# SOURCE is the one-line YAML under spec.source; ext4 with $FS_OPTS;
# published at $MNT/NAME.
manifest() {
	local tmp=$CFG/.$1.tmp
	cat > $tmp <<EOF
apiVersion: volumed/v1
kind: Volume
metadata: {name: $1}
spec:
  source:
    $2
  filesystem: {type: ext4$FS_OPTS}
  mounts: [{path: $MNT/$1}]
EOF
	chmod 0644 $tmp && mv -f $tmp $CFG/$1.yaml || fail "write manifest $1"
}

# nvme_manifest NAME NQN NSID [ADDR [PORT]]
nvme_manifest() {
	manifest $1 "nvme: {transport: tcp, address: ${4:-127.0.0.1}, port: ${5:-4420}, nqn: $2, namespace: $3}"
}

# iscsi_manifest NAME IQN LUN [PORTAL [CHAP_USER CHAP_FILE]]
iscsi_manifest() {
	local chap=
	[ -z "$5" ] || chap=", chap: {username: $5, passwordFile: $6}"
	manifest $1 "iscsi: {portal: \"${4:-127.0.0.1:3260}\", iqn: $2, lun: $3$chap}"
}

rm_manifest() { rm -f $CFG/$1.yaml; }

# luks_manifest NAME KEYS: an encrypted loop volume of ${SIZE:-64Mi}
# (pbkdf2 keyslots), ext4 with $FS_OPTS at $MNT/NAME; KEYS is the YAML
# list's members ("{file: /k}, {tpm2: {pcrs: [7]}}").
luks_manifest() {
	local tmp=$CFG/.$1.tmp
	cat > $tmp <<EOF
apiVersion: volumed/v1
kind: Volume
metadata: {name: $1}
spec:
  source:
    loop: {file: $IMG/$1.img, create: {size: ${SIZE:-64Mi}}}
  encryption: {luks2: {keys: [$2], pbkdf: pbkdf2}}
  filesystem: {type: ext4$FS_OPTS}
  mounts: [{path: $MNT/$1}]
EOF
	chmod 0644 $tmp && mv -f $tmp $CFG/$1.yaml || fail "write manifest $1"
}

# fake_reboot: the agent stops, and everything the kernel held for the
# scenario goes (mounts, dm-crypt mappings, loop devices); the state
# file stays.
fake_reboot() {
	local x
	agent_stop
	awk -v p="$VT_DIR/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r | while read -r x; do umount "$x"; done
	for x in /dev/mapper/volumed-*; do [ -e "$x" ] && cryptsetup close ${x##*/}; done
	for x in $(losetup -a | cut -d: -f1); do losetup -d $x; done
	expect_count "mounts under $VT_DIR after the reboot" "$(mounts_under $VT_DIR)" 0
	log "rebooted"
}

# ---- targets (in-kernel NVMe-oF and LIO, both configured by configfs) --

# mkloop NAME SIZE_MB: prints a loop device over a new sparse file.
mkloop() {
	local dev
	truncate -s ${2}M $IMG/$1.img && dev=$(losetup -f) && losetup $dev $IMG/$1.img && echo $dev
}

# in_netns NS CMD...: runs CMD in network namespace NS (none: here).
# nsenter, not `ip netns exec`: that remounts /sys and hides configfs.
# A target port listens in the namespace of whoever enables it.
in_netns() {
	local ns=$1
	shift
	if [ -n "$ns" ]; then nsenter --net=/run/netns/$ns "$@"; else "$@"; fi
}

# nvmet_subsys NQN COUNT SIZE_MB: a subsystem open to any host, with
# namespaces 1..COUNT each on its own loop device.
nvmet_subsys() {
	local s=$NVMET/subsystems/$1 i=1 dev
	mkdir $s || fail "nvmet: subsystem $1"
	echo 1 > $s/attr_allow_any_host
	while [ $i -le $2 ]; do
		dev=$(mkloop nvmet-${1##*:}-$i $3) || fail "nvmet: no loop device for namespace $i"
		mkdir $s/namespaces/$i && echo -n $dev > $s/namespaces/$i/device_path &&
			echo 1 > $s/namespaces/$i/enable || fail "nvmet: namespace $i of $1 on $dev"
		i=$((i + 1))
	done
}

# nvmet_port ID ADDR PORT NQN [NETNS]: exports NQN on tcp ADDR:PORT.
nvmet_port() {
	local p=$NVMET/ports/$1
	mkdir $p && echo tcp > $p/addr_trtype && echo ipv4 > $p/addr_adrfam &&
		echo $2 > $p/addr_traddr && echo $3 > $p/addr_trsvcid || fail "nvmet: port $1"
	in_netns "$5" ln -s $NVMET/subsystems/$4 $p/subsystems/$4 || fail "nvmet: listen on $2:$3 for $4"
	log "nvmet: $4 on tcp $2:$3${5:+ (netns $5)}"
}

# nvmet_loop NQN NSID: the loop device behind a namespace.
nvmet_loop() { cat $NVMET/subsystems/$1/namespaces/$2/device_path; }

# lio_target IQN COUNT SIZE_MB [CHAP_USER CHAP_SECRET]: an iSCSI target
# with LUNs 0..COUNT-1 on loop devices (iblock backstores, which follow a
# resized device), open to any initiator, with one-way CHAP when a user
# is given. lio_portal makes it listen.
lio_target() {
	local tpg=$LIO/iscsi/$1/tpgt_1 i=0 dev hba
	mkdir -p $tpg || fail "LIO: target $1"
	while [ $i -lt $2 ]; do
		dev=$(mkloop lio-${1##*:}-$i $3) || fail "LIO: no loop device for LUN $i"
		hba=$LIO/core/iblock_$(next_id)
		mkdir -p $hba/disk && echo "udev_path=$dev" > $hba/disk/control &&
			echo -n $dev > $hba/disk/udev_path && echo 1 > $hba/disk/enable ||
			fail "LIO: iblock backstore on $dev"
		mkdir $tpg/lun/lun_$i && ln -s $hba/disk $tpg/lun/lun_$i/port || fail "LIO: LUN $i of $1"
		i=$((i + 1))
	done
	echo 1 > $tpg/attrib/generate_node_acls
	echo 1 > $tpg/attrib/cache_dynamic_acls
	echo 0 > $tpg/attrib/demo_mode_write_protect
	if [ -n "$4" ]; then
		echo -n "$4" > $tpg/auth/userid
		echo -n "$5" > $tpg/auth/password
		echo 1 > $tpg/attrib/authentication
	else
		echo 0 > $tpg/attrib/authentication
	fi
}

# lio_portal IQN ADDR:PORT [NETNS]: listens and enables the target.
lio_portal() {
	in_netns "$3" mkdir $LIO/iscsi/$1/tpgt_1/np/$2 || fail "LIO: portal $2 for $1"
	echo 1 > $LIO/iscsi/$1/tpgt_1/enable || fail "LIO: enable $1"
	log "LIO: $1 on $2${3:+ (netns $3)}"
}

# both_targets NQN IQN [ADDR [NETNS]]: NVMe/TCP subsystem NQN with one
# namespace on ADDR:4420 and iSCSI target IQN with one LUN on ADDR:3260.
both_targets() {
	nvmet_subsys $1 1 64
	nvmet_port 1 ${3:-127.0.0.1} 4420 $1 "$4"
	lio_target $2 1 64
	lio_portal $2 ${3:-127.0.0.1}:3260 "$4"
}

# lio_loop IQN LUN: the loop device behind a LUN.
lio_loop() { cat $LIO/iscsi/$1/tpgt_1/lun/lun_$2/port/udev_path; }

next_id() {
	local n
	n=$(cat $VT_RUN/next-id 2>/dev/null || echo 0)
	echo $((n + 1)) > $VT_RUN/next-id
	echo $n
}

# storage_netns: a veth pair, vh0 (10.99.0.2) here and vt0 (10.99.0.1) in
# network namespace "tgt", so a target reached over vh0 can be cut off
# by taking vh0 down.
storage_netns() {
	$IP netns add tgt &&
		$IP link add vh0 type veth peer name vt0 &&
		$IP link set vt0 netns tgt &&
		$IP addr add 10.99.0.2/24 dev vh0 && $IP link set vh0 up &&
		$IP -n tgt addr add 10.99.0.1/24 dev vt0 && $IP -n tgt link set vt0 up && $IP -n tgt link set lo up ||
		fail "veth pair into netns tgt"
	wait_until 10 ping -c 1 -W 1 10.99.0.1 >/dev/null 2>&1 || fail "10.99.0.1 in netns tgt does not answer"
}

# ---- what the host's kernel has ---------------------------------------

# count_sysfs GLOB FILE [VALUE]: how many GLOB entries exist (whose FILE
# reads VALUE).
count_sysfs() {
	local n=0 x
	for x in $1; do
		[ -e "$x" ] || continue
		[ -z "$3" ] || [ "$(cat $x/$2 2>/dev/null)" = "$3" ] || continue
		n=$((n + 1))
	done
	echo $n
}

# nvme_ctrls [NQN]: how many NVMe-oF controllers (for NQN) exist; a PCI
# controller is a local disk of the VM, not counted.
nvme_ctrls() {
	local n=0 x
	for x in /sys/class/nvme/nvme*; do
		[ -e "$x" ] && [ "$(cat $x/transport)" != pcie ] || continue
		[ -z "$1" ] || [ "$(cat $x/subsysnqn 2>/dev/null)" = "$1" ] || continue
		n=$((n + 1))
	done
	echo $n
}

# iscsi_sessions [IQN]: how many iSCSI sessions (to IQN) exist.
iscsi_sessions() { count_sysfs '/sys/class/iscsi_session/session*' targetname "$1"; }

# is N CMD...: CMD prints N (for wait_until, which reruns CMD).
is() {
	local want=$1
	shift
	[ "$("$@")" = "$want" ]
}

# expect_count WHAT GOT WANT
expect_count() { [ "$2" = "$3" ] || fail "$1: $2, want $3"; }

mounted() { awk -v p="$1" '$2 == p { f = 1 } END { exit !f }' /proc/mounts; }
mount_opts() { awk -v p="$1" '$2 == p { o = $4 } END { print o }' /proc/mounts; }
mounts_under() { awk -v p="$1/" 'index($2, p) == 1 { n++ } END { print n + 0 }' /proc/mounts; }

# check_rw DIR TEXT: DIR is a mounted, writable filesystem and TEXT
# written to DIR/vmtest.txt comes back from the device (caches dropped).
check_rw() {
	mounted $1 || fail "$1 is not mounted"
	echo "$2" > $1/vmtest.txt && sync || fail "cannot write to $1"
	echo 3 > /proc/sys/vm/drop_caches
	[ "$(cat $1/vmtest.txt)" = "$2" ] || fail "$1/vmtest.txt reads '$(cat $1/vmtest.txt)', want '$2'"
}

# check_dev_rw DEV DIR TEXT: mkfs.ext4 on DEV, mounted at DIR, check_rw,
# unmounted again; without volumed.
check_dev_rw() {
	mkfs.ext4 -q -F $1 >/dev/null 2>&1 || fail "mkfs.ext4 $1"
	mkdir -p $2 && mount -t ext4 $1 $2 || fail "mount $1"
	check_rw $2 $3
	umount $2 || fail "umount $2"
}

# check_has DIR TEXT: DIR still holds what check_rw wrote.
check_has() {
	mounted $1 || fail "$1 is not mounted"
	[ "$(cat $1/vmtest.txt 2>/dev/null)" = "$2" ] || fail "$1/vmtest.txt reads '$(cat $1/vmtest.txt 2>&1)', want '$2' (data lost or reformatted?)"
}

# ---- secrets in /proc ---------------------------------------------------

# sampler_on: greps every process's cmdline and environ for the keys in
# $VT_DIR/keys.pat (patterns from a file, so its own argv holds none)
# into $VT_DIR/leaks, and notes in $VT_DIR/seen the processes running
# cryptsetup (proof that it sampled while keys were handed over), until
# sampler_off.
sampler_on() {
	echo cryptsetup > $VT_DIR/cs.pat
	touch $VT_DIR/sampling
	(
		while [ -e $VT_DIR/sampling ]; do
			grep -l -F -f $VT_DIR/keys.pat /proc/[0-9]*/cmdline /proc/[0-9]*/environ >> $VT_DIR/leaks 2>/dev/null
			grep -l -F -f $VT_DIR/cs.pat /proc/[0-9]*/cmdline >> $VT_DIR/seen 2>/dev/null
		done
	) &
	SAMPLER=$!
	bg_track $SAMPLER
}
sampler_off() { rm -f $VT_DIR/sampling && wait $SAMPLER; }

# ---- flows shared by scenarios -----------------------------------------

# shares_one A B WHAT: volumes A and B on one target share one attachment
# (controller or session). A comes first and makes the attachment, B
# joins it. Removing A leaves B and the attachment; removing B then
# removes it. Both come back at once with their data (nothing is
# formatted twice), and removing both at once removes it again. The
# scenario defines manifest_a and manifest_b (write A's and B's
# manifests) and attachments (prints how many its target has); WHAT
# names them in messages.
shares_one() {
	local a=$1 b=$2 what=$3
	manifest_a
	ready 60 $a
	manifest_b
	ready 60 $b
	[ "$(vfield $a device)" != "$(vfield $b device)" ] || fail "$a and $b both on $(vfield $a device)"
	check_rw $MNT/$a $a-data
	check_rw $MNT/$b $b-data
	expect_count "$what with two volumes" "$(attachments)" 1

	rm_manifest $a
	wait_until 60 gone $a || fail "$a still listed 60s after its manifest was removed: $(vstatus $a)"
	mounted $MNT/$a && fail "$MNT/$a still mounted after $a was removed"
	expect_count "$what with $b left" "$(attachments)" 1
	ready 10 $b
	check_has $MNT/$b $b-data
	rm_manifest $b
	wait_until 60 gone $b || fail "$b still listed 60s after its manifest was removed: $(vstatus $b)"
	wait_until 30 is 0 attachments || fail "$what left after the last volume went: $(attachments)"

	log "both back at once"
	manifest_a
	manifest_b
	ready 60 $a $b
	check_has $MNT/$a $a-data
	check_has $MNT/$b $b-data
	expect_count "$what with both back" "$(attachments)" 1
	rm_manifest $a
	rm_manifest $b
	wait_until 60 gone $a || fail "$a still listed 60s after its manifest was removed"
	wait_until 60 gone $b || fail "$b still listed 60s after its manifest was removed"
	wait_until 30 is 0 attachments || fail "$what left after both volumes were removed at once: $(attachments)"
	expect_count "mounts under $VT_DIR" "$(mounts_under $VT_DIR)" 0
}

# ---- between scenarios (run by /init) ----------------------------------

# vt_dump NAME: what helps to understand a failure.
vt_dump() {
	echo "---- agent log, last 60 lines (/w/$1/agent.log)"
	tail -n 60 /w/$1/agent.log 2>/dev/null
	echo "---- volumed status"
	[ -S /w/$1/volumed.sock ] && timeout 5 $VOLUMED status --socket /w/$1/volumed.sock 2>&1
	echo "---- nvme controllers"
	for c in /sys/class/nvme/nvme*; do [ -e "$c" ] && echo "${c##*/} $(cat $c/state) $(cat $c/transport) $(cat $c/address | tr '\n' ' ') $(cat $c/subsysnqn)"; done
	echo "---- iscsi sessions"
	for s in /sys/class/iscsi_session/session*; do [ -e "$s" ] && echo "${s##*/} $(cat $s/targetname) state=$(cat $s/state)"; done
	echo "---- mounts under /w"
	grep ' /w/' /proc/mounts
	echo "---- iscsid, last 10 lines"
	tail -n 10 /run/iscsid.log
	echo "---- kernel, last 30 lines"
	dmesg | tail -n 30
}

# vt_reset NAME: kills what the scenario started and removes everything
# it may have made, so the next one starts clean.
vt_reset() {
	local f x
	for f in $VT_RUN/pids/*; do
		[ -e "$f" ] || continue
		kill -9 $(cat $f) 2>/dev/null
		rm -f $f
	done
	awk '$2 ~ "^/w/" { print $2 }' /proc/mounts | sort -r | while read -r x; do umount -l "$x"; done
	iscsiadm -m node --logoutall=all >/dev/null 2>&1
	iscsiadm -m node -o delete >/dev/null 2>&1
	rm -rf /etc/iscsi/nodes /etc/iscsi/send_targets
	# A PCI controller is a local disk of the VM (the partition scenario's): kept.
	for x in /sys/class/nvme/nvme*; do [ -e $x/delete_controller ] && [ "$(cat $x/transport)" != pcie ] && echo 1 > $x/delete_controller; done
	for x in $NVMET/ports/*/subsystems/*; do [ -L "$x" ] && rm -f "$x"; done
	for x in $NVMET/ports/*; do [ -d "$x" ] && rmdir "$x"; done
	for x in $NVMET/subsystems/*/namespaces/*; do [ -d "$x" ] && echo 0 > $x/enable && rmdir "$x"; done
	for x in $NVMET/subsystems/*; do [ -d "$x" ] && rmdir "$x"; done
	for x in $LIO/iscsi/*/tpgt_*; do
		[ -d "$x" ] || continue
		echo 0 > $x/enable
		for f in $x/lun/lun_*/*; do [ -L "$f" ] && rm -f "$f"; done
		for f in $x/lun/lun_* $x/np/*; do [ -d "$f" ] && rmdir "$f"; done
		rmdir $x
	done
	for x in $LIO/iscsi/*:*; do [ -d "$x" ] && rmdir "$x"; done
	for x in $LIO/core/*_[0-9]*/*; do [ -d "$x" ] && rmdir "$x"; done
	for x in $LIO/core/*_[0-9]*; do [ -d "$x" ] && rmdir "$x"; done
	$IP link del vh0 2>/dev/null
	for x in /run/netns/*; do [ -e "$x" ] && $IP netns del ${x##*/}; done
	for x in /dev/mapper/volumed-*; do [ -e "$x" ] && cryptsetup close ${x##*/}; done
	for x in $(losetup -a | cut -d: -f1); do losetup -d $x; done
	rm -rf /w/$1
	x=$(nvme_ctrls)/$(iscsi_sessions)/$(losetup -a | wc -l)/$(mounts_under /w)
	[ "$x" = 0/0/0/0 ] || log "reset left nvme controllers/iscsi sessions/loop devices/mounts: $x"
}

# check_pinned_note: the status of the volume "boot" says it is pinned.
check_pinned_note() { vstatus boot 2>/dev/null | grep -q '"lastError": "pinned:'; }

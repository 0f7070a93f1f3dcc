# The crash points of issue 24's LVM operations, each a real SIGKILL, at
# the end of TestLVMGroup's second boot (sourced by lvmgroup.sh). A
# crashpoints build of volumed (/usr/lib/ostest/volumed-crash, the host's
# static binary) runs with a config, state and socket of its own, on the
# spare disks CP1..CP3 only (its selector), beside the image's volumed.
# Each run is killed at the next point (VOLUMED_CRASH_AT) and starts from
# what the run before left, so each run is also the previous crash's
# restart; a plain run ends the chain with the volume Ready and grown:
#
#   make:  pvcreate CP1/CP2, vgcreate vgcp, its thin pool cpool, the LV cp
#   grow:  CP3 picked and the size raised: pvcreate CP3, vgextend, lvextend
#
# then a plain run for source.lvm.grow on CP4 and CP5.
#
# Per run: cp.N.point, cp.N.exit, cp.N.cmds (lvm2's writing commands, from
# a wrapper in front of lvm on the agent's PATH: "op type last-arg;"),
# cp.N.left (the pvs and lvs reports of what the run left, JSON, by UUID
# and tags). cp.others.before/after: every other VG and LV.
CP=/run/cpcrash
CPBIN=/usr/lib/ostest/volumed-crash
# The wrapper in front of lvm is /usr/lib/ostest/cpbin/lvm: /run is
# noexec, and Go's exec skips what access(X_OK) refuses.
mkdir -p $CP/conf $CP/state

# Written aside and renamed in: a running agent watches the directory.
cpmanifest() {
	cat >$CP/cp.yaml.new <<EOF
apiVersion: volumed/v1
kind: Volume
metadata: {name: cp}
spec:
  source:
    lvm:
      volumeGroup: vgcp
      size: $1
      createVolumeGroup:
        disks: '$2'
        grow: true
        thinPools: [{name: cpool, size: 8Mi, metadataSize: 4Mi}]
  filesystem: {type: ext4, grow: true}
  mounts: [{path: /srv/cp}]
EOF
	mv $CP/cp.yaml.new $CP/conf/cp.yaml
}

# dev_of and fsbytes are lvmgroup.sh's, which sources this.
# The CP disks do not change during the chain: looked up once.
CPDEVS=$(for s in CP1 CP2 CP3; do dev_of $s; done)
# cpreport: the CP disks' PVs with their VGs (the only disks the crash
# agent may put a VG on: its selector), vgcp's LVs, by UUID and tags, on
# one line: the shell splits the JSON at its spaces and joins it with
# one (no tr, a process at each of the 13 runs; names and tags hold no
# space or wildcard).
cpreport() {
	local out
	# shellcheck disable=SC2086 # one device a word
	out=$(
		pvs --reportformat json -o pv_name,pv_uuid,vg_name,vg_uuid,vg_tags $CPDEVS 2>/dev/null
		lvs --reportformat json --units b --nosuffix -o lv_name,lv_uuid,lv_tags,lv_active,lv_size vgcp 2>/dev/null
	)
	set -f
	# shellcheck disable=SC2086
	set -- $out
	set +f
	printf '%s' "$*"
}
# others: every VG and LV but vgcp's and vgcpf's, for "nothing foreign
# touched".
others() {
	{
		vgs --reportformat json --units b --nosuffix -o vg_name,vg_uuid,vg_tags,pv_count,lv_count,vg_size -S 'vg_name!=vgcp && vg_name!=vgcpf'
		lvs --reportformat json --units b --nosuffix -o lv_uuid,lv_tags,lv_size,lv_active -S 'vg_name!=vgcp && vg_name!=vgcpf'
	} 2>&1 | tr -d '\n\t '
}
# cpfield VOLUME FIELD: vfield of the crash agent's volume (one sed).
cpfield() { volumed status --socket $CP/sock -o json "$1" 2>/dev/null | sed -n "/^    \"$2\": /{s///; s/,\$//; s/^\"//; s/\"\$//; p; q}"; }
# The resync: none in the chain of cp (10 min): each run reaches its
# crash point in the work of its start or, run 9, in the growth check
# its manifest change asks for; a resync there was a dozen lvm2 runs
# wasted, every 20 s. 20 s for cpf, whose VG takes the disk its manifest
# change picks only at a resync.
CPRESYNC=10m
CPARGS="run --config-dir $CP/conf --state-dir $CP/state --socket $CP/sock --metrics-address="

cpn=0
# cprun POINT [THEN]: one run of the agent, SIGKILLed at POINT; THEN, a
# function, runs beside it and brings the run to that point.
cprun() {
	cpn=$((cpn + 1))
	: >$CP/lvm.log
	echo "=== run $cpn: $1" >>$CP/agent.log
	PATH=/usr/lib/ostest/cpbin:$PATH VOLUMED_CRASH_AT=$1 timeout 240 $CPBIN $CPARGS --resync $CPRESYNC >>$CP/agent.log 2>&1 &
	pid=$!
	[ -z "$2" ] || $2
	wait $pid
	st=$?
	kv cp.$cpn.exit $st
	[ $st = 137 ] || fail "crash point $1: volumed exited $st, not SIGKILLed there: $(tail -n 15 $CP/agent.log)"
	cpnote "$1"
}
# cpnote POINT: what run cpn did and left.
cpnote() {
	phase "run $cpn ($1) done"
	kv cp.$cpn.point "$1"
	# The writing commands for the host; every command, counted, for the
	# log (what a run of the agent costs in lvm2 runs).
	kv cp.$cpn.cmds "$(awk -v con="$CONSOLE" '{ n[$1]++; all++ }
		/^(pv|vg|lv)(create|extend|change|remove|reduce|convert|rename)/ {
			t = "-"; for (i = 1; i < NF; i++) if ($i == "--type") t = $(i + 1); printf "%s %s %s;", $1, t, $NF }
		END { s = ""; for (c in n) s = s " " c " " n[c]; printf "OSTEST-LOG run '$cpn': %d lvm2 commands:%s\n", all, s > con }' $CP/lvm.log)"
	kv cp.$cpn.left "$(cpreport)"
}
# cpconverge WHAT CHECK: a plain run until CHECK holds, then stopped.
cpconverge() {
	cpn=$((cpn + 1))
	: >$CP/lvm.log
	echo "=== run $cpn: converge" >>$CP/agent.log
	PATH=/usr/lib/ostest/cpbin:$PATH $CPBIN $CPARGS --resync $CPRESYNC >>$CP/agent.log 2>&1 &
	pid=$!
	wait_until 240 "$2" || fail "volume cp not $1 after the crashes: $(volumed status --socket $CP/sock -o json cp 2>&1 | tr '\n' ' ') $(tail -n 15 $CP/agent.log)"
	kv cp.$cpn.phase "$(cpfield cp phase)"
	kill -TERM $pid
	wait $pid
	cpnote converge
}
# cpgrown, cpfgrown: the cheapest test first (each is a poll of
# wait_until, and every process costs emulated CPU).
cpgrown() {
	[ "$(fsbytes /srv/cp)" -gt "$CPFS" ] 2>/dev/null &&
		[ "$(lvs --noheadings --units b --nosuffix -o lv_size vgcp/cp 2>/dev/null | tr -d ' ')" = 67108864 ] && [ "$(cpfield cp phase)" = Ready ]
}

cpstart=$(now)
phase "crash points: start"
kv cp.others.before "$(others)"
# The image's volumed is stopped meanwhile (a stop detaches nothing): it
# would answer each of the crash agent's uevents with a growth check of
# its own volumes. Its start at the end lists vgcp and vgcpf, tagged
# and named by none of its manifests, as leftovers, and changes nothing.
systemctl stop volumed
cpmanifest 32Mi 'disk.serial == "CP1" || disk.serial == "CP2"'
for p in pvcreate:after-intent pvcreate:after-kernel vgcreate:after-intent vgcreate:after-kernel \
	lvcreate-pool:after-intent lvcreate-pool:after-kernel lvcreate:after-intent lvcreate:after-kernel; do
	cprun $p
done
# No plain run between the phases: the next run formats and mounts the
# LV the last crash left (Ready at 32 MiB); then the manifest picks CP3
# and asks for 64 MiB, and the growth check that change asks for grows
# it, killed in that. (Started on the larger manifest, the run grew it
# only at its resync: the growth check of its start came before the
# mount.)
cpready() { [ "$(cpfield cp phase)" = Ready ]; }
cpgrowphase() {
	volumed wait --socket $CP/sock --timeout 240s cp >/dev/null 2>&1
	wait_until 240 cpready || fail "volume cp not Ready at 32 MiB: $(tail -n 15 $CP/agent.log)"
	CPFS=$(fsbytes /srv/cp)
	cpmanifest 64Mi 'disk.serial in ["CP1", "CP2", "CP3"]'
}
cprun vgextend:after-intent cpgrowphase
for p in vgextend:after-kernel lvextend:after-intent lvextend:after-kernel; do
	cprun $p
done
kv cp.fs.before "$CPFS"
cpconverge grown cpgrown
kv cp.fs.after "$(fsbytes /srv/cp)"

# source.lvm.grow: the LV cpf follows vgcpf, made over CP4; CP5 is then
# picked (the manifest re-read on SIGHUP) and joins the VG, whose new
# extents the LV and its filesystem take. A plain run.
cpfmanifest() {
	cat >$CP/conf/cpf.yaml <<EOF
apiVersion: volumed/v1
kind: Volume
metadata: {name: cpf}
spec:
  source:
    lvm:
      volumeGroup: vgcpf
      grow: true
      createVolumeGroup: {disks: '$1', grow: true}
  filesystem: {type: ext4, grow: true}
  mounts: [{path: /srv/cpf}]
EOF
}
cpfsize() { lvs --noheadings --units b --nosuffix -o lv_size vgcpf/cpf 2>/dev/null | tr -d ' '; }
cpffree() { vgs --noheadings --units b --nosuffix -o vg_free vgcpf 2>/dev/null | tr -d ' '; }
cpffs() { fsbytes /srv/cpf; }
CPRESYNC=20s
cpfmanifest 'disk.serial == "CP4"'
PATH=/usr/lib/ostest/cpbin:$PATH $CPBIN $CPARGS --resync $CPRESYNC >>$CP/agent.log 2>&1 &
pid=$!
cpfready() { [ "$(cpfield cpf phase)" = Ready ]; }
# volumed wait long-polls the agent (no polling); Ready is then checked.
volumed wait --socket $CP/sock --timeout 240s cpf >/dev/null 2>&1
wait_until 240 cpfready || fail "volume cpf not Ready: $(tail -n 15 $CP/agent.log)"
CPFSIZE=$(cpfsize)
CPFFS=$(cpffs)
phase "cpf Ready"
kv cpf.size1 "$CPFSIZE"
kv cpf.free1 "$(cpffree)"
cpfmanifest 'disk.serial == "CP4" || disk.serial == "CP5"'
kill -HUP $pid
cpfgrown() { [ "$(cpffs)" -gt "$CPFFS" ] 2>/dev/null && [ "$(cpfsize)" -gt "$CPFSIZE" ]; }
wait_until 120 cpfgrown || { fail "volume cpf did not follow its VG: $(vgs vgcpf 2>&1 | tr "\n" " ")"; log_cmd tail -n 40 $CP/agent.log; }
phase "cpf grown"
kv cpf.size2 "$(cpfsize)"
kv cpf.free2 "$(cpffree)"
kv cpf.pvs "$(vgs --noheadings -o pv_count vgcpf | tr -d ' ')"
kv cpf.fsgrown "$([ "$(cpffs)" -gt "$CPFFS" ] && echo yes)"
kill -TERM $pid
wait $pid
kv cp.others.after "$(others)"
systemctl start volumed
volumed wait data thin adopt --timeout 240s >/dev/null 2>&1
# The three phases from one status read ("NAME PHASE" lines).
sysready() {
	SYS=$(vfields phase data thin adopt)
	for v in data thin adopt; do
		case $SYS in *"$v Ready"*) ;; *) return 1 ;; esac
	done
}
wait_until 240 sysready || fail "the image's volumed, started again, has not its volumes Ready: $(volumed status 2>&1 | tr '\n' ' ')"
phase "the image's volumed Ready again"
printf '%s\n' "$SYS" | while read -r v p; do kv cp.system.$v "$p"; done
# One read of the journal for both VGs.
left=$(journalctl -b -u volumed --no-pager -o cat -g 'named by no manifest')
for vg in vgcp vgcpf; do
	kv cp.leftover.$vg "$(printf '%s\n' "$left" | grep -c "volume group $vg (uuid")"
done
kv cp.guest.seconds "$(awk -v a="$cpstart" -v b="$(now)" 'BEGIN { print b - a }')"
log_cmd lvs -o lv_name,lv_uuid,lv_tags,lv_size,segtype vgcp
log_cmd grep -c . $CP/lvm.log
log_cmd tail -n 12 $CP/agent.log
done_step crash

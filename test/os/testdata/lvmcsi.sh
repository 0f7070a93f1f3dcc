# The lvm backend of the CSI controller (issue 25), sourced by lvmthin.sh
# once volumed (run with --csi-endpoint and --csi-lvm-volume-groups
# vgthin) is up. vmcsi makes the calls the external-provisioner, -resizer
# and -snapshotter sidecars and the kubelet make, each mutating one twice.
#
#   lin: a linear class: GetCapacity before and after a create (the VG's
#        free extents less the promise), no LV until a stage, no snapshot.
#   a:   a thin class: create (accessibility requirements: this node) →
#        stage (the LV made, tagged) → publish → delete refused while
#        staged → expand → snapshot (a thin snapshot, tagged, inactive) →
#        restore into b (the snapshot's bytes) → unpublish → unstage →
#        delete: the LVs gone, the capacity back.
CSI="/usr/lib/ostest/vmcsi unix:///run/volumed-csi/csi.sock"
LINEAR="backend=lvm volumeGroup=vgthin"
THIN="backend=lvm volumeGroup=vgthin type=thin thinPool=pool overprovisionRatio=2"
KUBE=/var/lib/kubelet
# csicall WHAT ARGS...: vmcsi's answer; its failure fails the test,
# with what systemd said of volumed meanwhile (a restart cuts a call
# with "Unavailable: error reading from server: EOF": the watchdog's
# kill, a crash).
csicall() {
	local out
	out=$($CSI "$@" 2>&1) || {
		fail "csi $*: $out"
		log_cmd journalctl -b -u volumed --no-pager -o short-monotonic -p warning -n 20
		return 1
	}
	printf '%s\n' "$out"
}
# refused ARGS...: the gRPC code of a call that must fail.
refused() {
	local out
	out=$($CSI "$@" 2>&1) && { fail "csi $*: succeeded, want a refusal"; return 1; }
	log "csi $1 refused: $out"
	printf '%s' "$out" | sed -n 's/.*code = \([A-Za-z]*\).*/\1/p'
}
lvf() { lvs --noheadings --units b --nosuffix -o "$2" "vgthin/$1" 2>/dev/null | tr -d ' '; }
gone() { lvs "vgthin/$1" >/dev/null 2>&1 || echo yes; }
sum() { sha256sum <"$1" | cut -d' ' -f1; }
# staged ID NAME CONTEXT...: stage (twice) and publish (twice) as the
# kubelet does; prints the target.
staged() {
	local id=$1 n=$2 stage=$KUBE/plugins/kubernetes.io/csi/volumed.io/$2/globalmount target=$KUBE/pods/pod-$2/volumes/kubernetes.io~csi/$2/mount
	shift 2
	mkdir -p "$stage" "${target%/mount}"
	csicall stage "$id" "$stage" mount ext4 "$@" >/dev/null && csicall stage "$id" "$stage" mount ext4 "$@" >/dev/null &&
		csicall publish "$id" "$stage" "$target" mount ext4 >/dev/null && csicall publish "$id" "$stage" "$target" mount ext4 >/dev/null
	echo "$target"
}
unstaged() {
	local id=$1 n=$2
	csicall unpublish "$id" "$KUBE/pods/pod-$n/volumes/kubernetes.io~csi/$n/mount" >/dev/null
	csicall unpublish "$id" "$KUBE/pods/pod-$n/volumes/kubernetes.io~csi/$n/mount" >/dev/null
	csicall unstage "$id" "$KUBE/plugins/kubernetes.io/csi/volumed.io/$n/globalmount" >/dev/null
	csicall unstage "$id" "$KUBE/plugins/kubernetes.io/csi/volumed.io/$n/globalmount" >/dev/null
}

phase "csi: start"
wait_until 180 $CSI probe || fail "the CSI service not ready: $($CSI probe 2>&1)"

kv csi.lin.cap.before "$($CSI capacity $LINEAR)"
lin=$(csicall create pvc-lin 67108864 ostest $LINEAR | head -n 1)
kv csi.lin.cap.after "$($CSI capacity $LINEAR)"
kv csi.lin.nolv "$(gone csi-pvc-lin)"
kv csi.lin.snapshot "$(refused snapshot lin-snap "$lin")"
csicall delete "$lin" >/dev/null
kv csi.lin.cap.end "$($CSI capacity $LINEAR)"
phase "csi: linear class done"

kv csi.cap.before "$($CSI capacity $THIN)"
out=$(csicall create pvc-a 33554432 ostest $THIN)
id=$(printf '%s\n' "$out" | head -n 1)
ctx=$(printf '%s\n' "$out" | tail -n +2)
kv csi.cap.after "$($CSI capacity $THIN)"
log "csi volume $id, context: $(echo $ctx)"
kv csi.create.nolv "$(gone csi-pvc-a)"
# shellcheck disable=SC2086 # the context: one KEY=VALUE a word
target=$(staged "$id" pvc-a $ctx)
# One report for the four (each lvm2 run costs ~0.4 s of emulated CPU).
row=$(lvs --noheadings --units b --nosuffix --separator '|' -o segtype,pool_lv,lv_tags,lv_size vgthin/csi-pvc-a 2>/dev/null | tr -d ' ')
IFS='|' read -r segtype pool tags size <<EOF
$row
EOF
kv csi.lv.segtype "$segtype"
kv csi.lv.pool "$pool"
kv csi.lv.tags "$tags"
kv csi.lv.size "$size"
phase "csi: pvc-a created, staged, published"
kv csi.staged.fstype "$(findmnt -no FSTYPE "$KUBE/plugins/kubernetes.io/csi/volumed.io/pvc-a/globalmount")"
head -c 1M /dev/urandom >"$target/payload" && sync "$target/payload"
kv csi.before.sum "$(sum "$target/payload")"
kv csi.delete.staged "$(refused delete "$id")"
kv csi.expand.bytes "$(csicall expand "$id" 50331648 "$target")"
kv csi.lv.grown "$(lvf csi-pvc-a lv_size)"
phase "csi: pvc-a grown: $(df -B1 --output=size "$target" | tail -n 1)"

# The snapshot holds what was written before it, unsynced too (volumed
# flushes the filesystem), not what comes after.
head -c 64K /dev/urandom >"$target/unsynced"
kv csi.snap.id "$(csicall snapshot s1 "$id" | head -n 1)"
kv csi.snap.tags "$(lvf csi-snap-s1 lv_tags)"
kv csi.snap.active "$(lvf csi-snap-s1 lv_active)"
log "snapshot LV: $(lvs --noheadings -o lv_name,lv_attr,origin,pool_lv,lv_tags vgthin/csi-snap-s1)"
phase "csi: snapshot taken"
unsynced=$(sum "$target/unsynced")
head -c 1M /dev/urandom >"$target/payload" && sync "$target/payload"
kv csi.after.sum "$(sum "$target/payload")"

out=$(csicall create pvc-b 50331648 ostest from=snap/ostest/s1 $THIN)
rid=$(printf '%s\n' "$out" | head -n 1)
rctx=$(printf '%s\n' "$out" | tail -n +2)
kv csi.restore.lvtags "$(lvf csi-pvc-b lv_tags)"
# shellcheck disable=SC2086
rtarget=$(staged "$rid" pvc-b $rctx)
kv csi.restore.sum "$(sum "$rtarget/payload")"
[ "$(sum "$rtarget/unsynced" 2>/dev/null)" = "$unsynced" ] || fail "the restored copy lacks what was written unsynced before the snapshot"
kv csi.restore.active "$(lvf csi-pvc-b lv_active)"
phase "csi: pvc-b restored, staged, published"
log_cmd lvs -a -o lv_name,lv_attr,lv_size,pool_lv,origin,data_percent,lv_tags vgthin

unstaged "$rid" pvc-b
csicall delete "$rid" >/dev/null
kv csi.restore.gone "$(gone csi-pvc-b)"
csicall deletesnap snap/ostest/s1 >/dev/null
kv csi.snap.gone "$(gone csi-snap-s1)"
unstaged "$id" pvc-a
csicall delete "$id" >/dev/null
kv csi.lv.gone "$(gone csi-pvc-a)"
kv csi.cap.end "$($CSI capacity $THIN)"
phase "csi: all torn down and deleted"
log_cmd volumed status

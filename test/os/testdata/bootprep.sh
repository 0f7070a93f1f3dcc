# The boot-cost benchmark's first boot (not measured): makes the
# pre-formatted loop images, then puts in place what mounts them at the
# next boots: volumed's manifests or the fstab lines (bootcost_test.go).
kind=$(cat /usr/lib/ostest/bench/kind)
VOLS=$(cat /usr/lib/ostest/bench/vols)
size=$(cat /usr/lib/ostest/bench/size)
mkdir -p /var/lib/ostest
for v in $VOLS; do
	truncate -s "$size" /var/lib/ostest/$v.img
	check "mkfs.ext4 $v" mkfs.ext4 -q -F -L "$v" /var/lib/ostest/$v.img
	mkdir -p /srv/$v
done
case $kind in
volumed | onewait) cp /usr/lib/ostest/bench/v*.yaml /etc/volumed/volumes.d/ ;;
fstab) cat /usr/lib/ostest/bench/fstab >>/etc/fstab ;;
*) fail "unknown kind $kind" ;;
esac
touch /var/lib/ostest/bench-prepared
sync
log "prepared $kind: $(echo $VOLS | wc -w) images of $size"
done_step prepared
systemctl poweroff

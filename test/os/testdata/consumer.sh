#!/bin/sh
# consumer.sh NAME VOLUME...: a service that uses the volumes: at start it
# reports what it finds (phase, mount), then keeps a file open on each
# volume until it is stopped, as a database would. A volume taken away
# under it would fail the unmount (busy) or its writes.
. /usr/lib/ostest/lib.sh
name=$1
shift
vfields phase "$@" | while read -r v p; do kv "$name.start.$v" "$p"; done
for v in "$@"; do
	mounted /srv/$v || fail "$name started with /srv/$v not mounted"
done
log "consumer $name started"
n=3
for v in "$@"; do
	eval "exec $n>>/srv/$v/consumer-$name.log"
	eval "echo started \$(now) >&$n"
	n=$((n + 1))
done
trap 'log "consumer $name stopping"; exit 0' TERM
sleep infinity &
wait

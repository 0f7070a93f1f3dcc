package ostest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestDelayedVolume: a volume's disk answers every I/O seconds late while
// the agent formats it. With the agent's bound on an operation
// (--op-timeout) the format is stopped and the volume says why; volumed
// status answers at once all along; once the disk is fast again the
// volume comes up.
func TestDelayedVolume(t *testing.T) {
	t.Parallel()
	m := faultMachine(t, "delay")
	m.AddDisk("SLOW1", 64<<20)
	m.AddFile("/etc/systemd/system/volumed.service.d/timeout.conf", 0o644, "[Service]\nExecStart=\nExecStart=/usr/bin/volumed run --op-timeout 20s\n")
	m.AddFile("/etc/volumed/volumes.d/fast.yaml", 0o644, loopManifest("fast", "/srv/fast"))
	m.AddFile("/usr/lib/ostest/slow.yaml", 0o644, deviceManifest("slow", "/dev/mapper/slow", "/srv/slow"))
	m.AddTest("delay", "Wants=volumed-wait@fast.service\nAfter=volumed-wait@fast.service", delayScript)
	ctx := context.Background()
	r := m.Boot(ctx)
	r.Finish(t, "delay", 10*time.Minute)
	r.CheckGuest(t)
	t.Logf("status under a %s ms disk: slowest of %s answers %s ms, %s of them late (%s ms with nothing slow before, %s ms after); the volume said: %s",
		r.KV("delay.ms"), r.KV("status.n"), r.KV("status.max"), r.KV("status.late"), r.KV("status.base"), r.KV("status.after"), r.KV("slow.says"))
	if r.KV("status.n") == "" {
		t.Fatal("the guest measured no status call")
	}
	if says := r.KV("slow.says"); !strings.Contains(says, "timed_out") {
		t.Errorf("while its format crawled, the volume said %q: nothing about an operation that timed out", says)
	}
}

// The volume appears once its disk is slow: every read and write waits
// 2 s, so the probe, mkfs and mount crawl. A status call that waited on
// the disk would take one such I/O longer than one with nothing slow;
// what it costs with nothing slow is measured before the slow phase and
// after it, the more of the two taken, so that the load of the VMs
// beside this one (which moves a call by a second or more) is in it.
const delayScript = `. /usr/lib/ostest/faults.sh
dm_make slow SLOW1 || exit 0
DELAY=2000
dm_swap slow "$(delay slow $DELAY)"
kv delay.ms $DELAY
# What a status call costs here with nothing slow (a Go binary under TCG).
base=0
for i in 1 2 3; do ms=$(timed volumed status -o json); [ "$ms" -gt "$base" ] && base=$ms; done
kv status.base "$base"
cp /usr/lib/ostest/slow.yaml /etc/volumed/volumes.d/slow.yaml
max=0 n=0 says="" times=""
end=$(( $(uptime_s) + 120 ))
while [ "$(uptime_s)" -lt $end ]; do
	ms=$(timed volumed status -o json) || fail "status failed: $(head -c 300 /tmp/timed.out)"
	n=$((n + 1)); [ "$ms" -gt "$max" ] && max=$ms; times="$times $ms"
	line_with /tmp/timed.out '"name": "fast"' >/dev/null || fail "status -o json lost the volume fast"
	ms=$(timed volumed status slow)
	n=$((n + 1)); [ "$ms" -gt "$max" ] && max=$ms; times="$times $ms"
	line=$(line_with /tmp/timed.out "timed out")
	if [ -n "$line" ]; then says=$line; break; fi
	sleep 1
done
kv status.max "$max"; kv status.n "$n"; kv slow.says "$(printf '%s' "$says" | tr ' ' '_' | head -c 400)"
log_cmd volumed status slow
check "fast still Ready" volumed wait fast --timeout 5s
dm_swap slow "$(linear slow)"
check "slow Ready once its disk is fast again" volumed wait slow --timeout 5m
log_cmd volumed status slow
after=0
for i in 1 2 3; do ms=$(timed volumed status -o json); [ "$ms" -gt "$after" ] && after=$ms; done
kv status.after "$after"
[ "$after" -gt "$base" ] && base=$after
# At once: within one I/O of the slow disk of what it costs with nothing
# slow. A call that waited on the disk would be late every time; one late
# call among them is the host's load (a guest stalled 2 s under load 14
# once, in a run whose other calls took at most 0.9 s).
late=0
for ms in $times; do [ "$ms" -lt $((base + DELAY)) ] || late=$((late + 1)); done
kv status.late "$late"
[ "$late" -le 1 ] || fail "volumed status took $DELAY ms more than with nothing slow ($base ms) in $late of $n calls while a volume's disk was slow:$times"
done_step delay
`

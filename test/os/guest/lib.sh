# The guest side of test/os: sourced by the scripts a test adds. Each
# function writes one marked line to the serial console, which the host
# reads (see the package doc in test/os):
#
#	OSTEST-LOG text        copied into the test's log
#	OSTEST-KV key value    a value the host compares (UUIDs, checksums)
#	OSTEST-FAIL text       fails the test with text
#	OSTEST-DONE step       the host waits for this
CONSOLE=${OSTEST_CONSOLE:-/dev/ttyS0}

# now: the uptime, read by the shell itself: under TCG a process (cut) is
# about 0.2 s of the one emulated CPU, and log runs it at every line.
now() { local up; read -r up _ </proc/uptime; printf '%s\n' "$up"; }
say() { printf '%s\n' "$*" >"$CONSOLE"; }
log() { local up; read -r up _ </proc/uptime; say "OSTEST-LOG [$up] $*"; }
kv() { say "OSTEST-KV $1 $2"; }
# fail records a failure and goes on: a test sees every check that failed.
fail() { local up; read -r up _ </proc/uptime; say "OSTEST-FAIL [$up] $(printf '%s' "$*" | tr '\n' ' ')"; }
done_step() { say "OSTEST-DONE $1"; }
# check DESCRIPTION CMD...: fails with DESCRIPTION and CMD's output when
# CMD fails.
check() {
	local what=$1 out
	shift
	out=$("$@" 2>&1) || fail "$what: $(printf '%s' "$out" | tail -n 5)"
}
# log_cmd CMD...: runs CMD and copies its output, line by line, to the log.
log_cmd() {
	"$@" 2>&1 | while IFS= read -r l; do say "OSTEST-LOG $l"; done
}
# wait_until SECS CMD...: runs CMD until it succeeds, every 0.2 s at
# first and then less often, up to every 2 s; false if it has not after
# SECS. Under TCG a poll (volumed status, lvs) costs the one emulated CPU
# that the work awaited needs: polling at 0.2 s slowed that work down.
wait_until() {
	local end pause=0.2 up
	read -r up _ </proc/uptime
	end=$((${up%.*} + $1))
	shift
	while ! "$@"; do
		read -r up _ </proc/uptime
		[ "${up%.*}" -lt $end ] || return 1
		sleep $pause
		case $pause in 0.2) pause=0.5 ;; 0.5) pause=1 ;; *) pause=2 ;; esac
	done
}
# vfield NAME FIELD: a top-level scalar of the volume's status (phase,
# device, capacityBytes, ...), quotes stripped.
# One sed, not three processes: each is about 0.2 s of emulated CPU.
vfield() {
	volumed status -o json "$1" 2>/dev/null | sed -n -e "s/^    \"$2\": \(.*\)/\1/" -e 't found' -e 'd' -e ':found' -e 's/,$//; s/^"//; s/"$//; p; q'
}

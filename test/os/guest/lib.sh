# The guest side of test/os: sourced by the scripts a test adds. Each
# function writes one marked line to the serial console, which the host
# reads (see the package doc in test/os):
#
#	OSTEST-LOG text        copied into the test's log
#	OSTEST-KV key value    a value the host compares (UUIDs, checksums)
#	OSTEST-FAIL text       fails the test with text
#	OSTEST-DONE step       the host waits for this
CONSOLE=${OSTEST_CONSOLE:-/dev/ttyS0}

# now, cpu: read by the shell, no process of their own (under TCG each
# process costs ~0.2 s of the guest's one emulated CPU). cpu is the
# guest's busy CPU seconds since boot: a test logs what a phase cost.
now() {
	local up _r
	read -r up _r </proc/uptime
	echo "$up"
}
cpu() {
	local _r u n s _i _w q sq
	read -r _r u n s _i _w q sq _r </proc/stat
	echo $(((u + n + s + q + sq) / 100))
}
# phase TEXT: logs TEXT with the guest's CPU so far.
phase() { log "$* (guest CPU $(cpu) s)"; }
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
wait_until() { wait_every 2 "$@"; }
# wait_every MAX SECS CMD...: wait_until with pauses growing up to MAX
# seconds: for what only volumed's resync brings (its health check, once
# a minute), where a poll every 2 s cost more than the wait.
wait_every() {
	local end max=$1 pause=0.2 up
	read -r up _ </proc/uptime
	end=$((${up%.*} + $2))
	shift 2
	while ! "$@"; do
		read -r up _ </proc/uptime
		[ "${up%.*}" -lt $end ] || return 1
		sleep $pause
		case $pause in 0.2) pause=0.5 ;; 0.5) pause=1 ;; 1) pause=2 ;; *) pause=$max ;; esac
	done
}
# vfield NAME FIELD: a top-level scalar of the volume's status (phase,
# device, capacityBytes, ...), quotes stripped.
# A status read that fails is made once more: at host load 20 one timed
# out (10 s) now and then, and the empty value failed what it fed. One
# sed, not a sed, a head and a sed (each process costs ~0.2 s of emulated
# CPU, and this is a poll of many waits).
vfield() {
	local out
	out=$(volumed status -o json "$1" 2>/dev/null) || out=$(volumed status -o json "$1" 2>/dev/null)
	printf '%s\n' "$out" | sed -n "/^    \"$2\": /{s///; s/,\$//; s/^\"//; s/\"\$//; p; q}"
}
# vfields FIELDS NAME...: a line "NAME VALUE" for each volume named and
# each of its top-level scalars matching FIELDS (an awk regular expression
# of field names: phase, "phase|lastError"), in the order of the status:
# vfield for many volumes at the price of two processes.
vfields() {
	local f=$1
	shift
	volumed status -o json "$@" 2>/dev/null | awk -v f="^    \"($f)\": " '
		/^    "name": / { n = $2; gsub(/[",]/, "", n) }
		match($0, f) { v = substr($0, RLENGTH + 1); sub(/,$/, "", v); gsub(/^"|"$/, "", v); print n, v }'
}
# mounted PATH: PATH is a mount point (mountpoint -q), read by the shell
# from mountinfo, no process.
mounted() {
	local _a _b _c _d mp _rest
	while read -r _a _b _c _d mp _rest; do
		[ "$mp" = "$1" ] && return 0
	done </proc/self/mountinfo
	return 1
}
# vjson NAME...: a line "NAME JSON" for each volume named, JSON its
# `volumed status -o json NAME` (an array of the one volume) on one line:
# many volumes' status for two processes.
vjson() {
	volumed status -o json "$@" 2>/dev/null | awk '
		/^  \{/ { o = ""; n = "" }
		/^    "name": / { n = $2; gsub(/[",]/, "", n) }
		{ s = $0; sub(/^ +/, "", s); o = o s }
		/^  \}/ { sub(/,$/, "", o); print n, "[" o "]" }'
}
# agent_id: the agent's PID and restart count, from one systemctl; a
# crash or a restart changes it.
agent_id() {
	systemctl show -p MainPID -p NRestarts volumed.service | { id=""; while read -r l; do id="$id${id:+/}$l"; done; echo "$id"; }
}

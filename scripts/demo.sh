#!/usr/bin/env bash
# make demo: real loop volumes, real mkfs and mounts, no setup. Runs in a
# private mount namespace under a temp dir, and cleans up after itself.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "make demo needs root (it makes loop devices and mounts): sudo make demo" >&2
  exit 1
fi
# Preflight, before any volume is made: the programs the demo runs, and
# loop devices. (make demo installs the programs first: scripts/deps.sh.)
missing=()
for c in mkfs.ext4 mkfs.xfs mkfs.btrfs losetup unshare; do
  PATH="$PATH:${VOLUMED_SBIN-/usr/local/sbin:/usr/sbin:/sbin}" command -v "$c" >/dev/null || missing+=("$c")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "make demo needs ${missing[*]}, which this machine lacks: sudo make deps (or scripts/deps.sh demo) installs them" >&2
  exit 1
fi
if [ ! -e /dev/loop-control ] && ! modprobe loop 2>/dev/null; then
  echo "make demo needs loop devices: this kernel has no /dev/loop-control (modprobe loop failed)" >&2
  exit 1
fi
if [ -z "${VOLUMED_DEMO_NS:-}" ]; then
  exec env VOLUMED_DEMO_NS=1 unshare -m --propagation private -- "$0" "$@"
fi

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin/volumed"
work=$(mktemp -d /tmp/volumed-demo.XXXXXX)
conf="$work/volumes.d"; state="$work/state"; sock="$work/volumed.sock"; mnt="$work/srv"
mkdir -p "$conf" "$work/images" "$mnt"
chmod 755 "$work" "$conf"
agent=""

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
v() { "$bin" "$@" --socket "$sock"; }

cleanup() {
  set +e
  if [ -n "$agent" ] && kill -0 "$agent" 2>/dev/null; then
    rm -f "$conf"/*.yaml
    for _ in $(seq 1 100); do
      [ "$("$bin" status -o json --socket "$sock" 2>/dev/null | grep -c '"name"')" = 0 ] && break
      sleep 0.1
    done
    kill -TERM "$agent"; wait "$agent" 2>/dev/null
  fi
  # Belt and braces: nothing of the demo may outlive it.
  grep " $work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null
  for f in /sys/block/loop*/loop/backing_file; do
    # Another program's device may go between the glob and the read.
    b=$(cat "$f" 2>/dev/null) || continue
    case "$b" in "$work"/*) losetup -d "/dev/$(basename "$(dirname "$(dirname "$f")")")" ;; esac
  done
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$conf/web.yaml" <<YAML
apiVersion: volumed/v1
kind: Volume
metadata: { name: web }
spec:
  source:
    loop: { file: $work/images/web.img, create: { size: 64Mi } }
  filesystem: { type: ext4, mountOptions: [noatime] }
  mounts:
    - path: $mnt/web
    - path: $mnt/web-readonly
      readOnly: true
YAML
cat >"$conf/logs.yaml" <<YAML
apiVersion: volumed/v1
kind: Volume
metadata: { name: logs }
spec:
  source:
    loop: { file: $work/images/logs.img, create: { size: 320Mi } }
  filesystem: { type: xfs }
  mounts: [ { path: $mnt/logs } ]
YAML
cat >"$conf/cache.yaml" <<YAML
apiVersion: volumed/v1
kind: Volume
metadata: { name: cache }
spec:
  source:
    loop: { file: $work/images/cache.img, create: { size: 128Mi } }
  filesystem: { type: btrfs }
  mounts: [ { path: $mnt/cache } ]
YAML

step "three manifests in $conf"
ls -l "$conf"
step "volumed validate --strict (also: does this host have each filesystem's tools and kernel support?)"
"$bin" validate --strict "$conf"

step "volumed run (log: $work/agent.log)"
"$bin" run --config-dir "$conf" --state-dir "$state" --socket "$sock" --metrics-address 127.0.0.1:0 >"$work/agent.log" 2>&1 &
agent=$!
start=$EPOCHREALTIME
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.05; done
v wait web logs cache --timeout 60s || { echo "agent log:"; tail -20 "$work/agent.log"; exit 1; }
awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "all Ready in %.2fs (image files created, formatted, mounted)\n", b - a }'
v status

step "df of the targets"
df -h "$mnt/web" "$mnt/web-readonly" "$mnt/logs" "$mnt/cache"

step "write through $mnt/web, read through the read-only target"
echo "hello from volumed" >"$mnt/web/index.html"
cat "$mnt/web-readonly/index.html"
if (echo nope >"$mnt/web-readonly/x") 2>/dev/null; then echo "read-only target accepted a write!"; exit 1; else echo "write to the read-only target refused: read-only file system"; fi

step "volumed status web"
v status web

step "remove logs.yaml: unpublish, unmount, detach"
rm "$conf/logs.yaml"
for _ in $(seq 1 200); do
  v status -o json | grep -q '"name": "logs"' || break
  sleep 0.05
done
v status
echo "image kept: $(ls -sh "$work/images/logs.img")"
echo "loop devices of the demo now:"
for f in /sys/block/loop*/loop/backing_file; do
  b=$(cat "$f" 2>/dev/null) || continue
  case "$b" in "$work"/*) echo "  /dev/$(basename "$(dirname "$(dirname "$f")")") -> $b";; esac
done

step "agent log (operations)"
grep -E 'operation (finished|failed)' "$work/agent.log" | sed -E 's/^time=[^ ]+ //' | head -20

step "cleaning up (all manifests removed, agent stopped)"

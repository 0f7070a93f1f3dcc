#!/usr/bin/env bash
# Prints the path of a pinned Go tool in <repo>/.cache/bin, building it
# from the Go module proxy first when it is missing, of another version,
# or built by another Go (golangci-lint refuses to load code of a newer
# Go than it was built with).
#
#   scripts/gotool.sh PACKAGE VERSION     e.g. golang.org/x/tools/cmd/deadcode v0.52.0
#
# GO names the go command (default: go on PATH).
set -euo pipefail

pkg=$1 version=$2
go=${GO:-go}
bin=$(cd "$(dirname "$0")/.." && pwd)/.cache/bin
exe=$bin/${pkg##*/}
want_go=$("$go" env GOVERSION)

# go version -m: "<exe>: go1.26.8", then "\tmod\t<module>\t<version>\t<sum>".
current() {
  "$go" version -m "$exe" 2>/dev/null |
    awk -v v="$version" -v g="$want_go" 'NR == 1 { built = $NF } $1 == "mod" && $3 == v { mod = 1 } END { exit !(mod && built == g) }'
}

if ! current; then
  echo "building ${pkg##*/} $version into $bin" >&2
  GOBIN=$bin "$go" install "$pkg@$version"
  current || { echo "$exe: not $version built by $want_go after go install" >&2; exit 1; }
fi
echo "$exe"

#!/usr/bin/env bash
# Runs every `go test -fuzz` target in the module for FUZZTIME each (CI:
# briefly, on top of the committed seed corpora that `go test` always
# replays). A crash fails the run; `go test` writes the failing input to
# the package's testdata/fuzz/<Target>/, where it becomes a regression case.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
# The fuzzer minimizes each new input for up to a minute by default,
# byte by byte; on a target whose inputs are sectors of a disk (FuzzRead
# in drivers/gpt) that took the whole run (30 execs in 15 s; 370,000
# with this bound).
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-500x}
GO=${GO:-go}
status=0
while IFS= read -r line; do
  file=${line%%:*}
  target=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"${line#*:}")
  pkg=$(dirname "$file")
  echo "fuzz $pkg $target for $FUZZTIME"
  if ! $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg"; then
    status=1
  fi
done < <(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . | grep -v '^./\.cache/' | sort)
exit $status

#!/usr/bin/env bash
# Runs every `go test -fuzz` target in the module for FUZZTIME executions
# each (CI: briefly, on top of the committed seed corpora that `go test`
# always replays). A crash fails the run; `go test` writes the failing
# input to the package's testdata/fuzz/<Target>/, where it becomes a
# regression case.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-100000x}
# A duration ends in a race in Go's fuzz coordinator (go.dev/issue/75804,
# fixed in Go 1.27): on a loaded machine a worker still busy at the
# deadline fails the target with a bare "context deadline exceeded" and
# no input. It failed a CI run of this project (FuzzTPM2Token). A count
# has no deadline to race.
case $FUZZTIME in
  *[0-9]x) ;;
  *)
    echo "fuzz.sh: FUZZTIME=$FUZZTIME: give a count of executions (e.g. FUZZTIME=2000000x), not a duration: with a duration Go's fuzzer can fail at its end with \"context deadline exceeded\" on a busy machine (go.dev/issue/75804)" >&2
    exit 2
    ;;
esac
# The fuzzer minimizes each new input for up to a minute by default,
# byte by byte; on a target whose inputs are sectors of a disk (FuzzRead
# in drivers/gpt) that took the whole run (30 execs in 15 s; 370,000
# with this bound).
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-500x}
# A target that slows down by orders of magnitude fails here, named,
# rather than holding the run.
FUZZTIMEOUT=${FUZZTIMEOUT:-10m}
GO=${GO:-go}
status=0
while IFS= read -r line; do
  file=${line%%:*}
  target=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"${line#*:}")
  pkg=$(dirname "$file")
  echo "fuzz $pkg $target for $FUZZTIME"
  if ! $GO test -run '^$' -timeout "$FUZZTIMEOUT" -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg"; then
    status=1
  fi
done < <(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . | grep -v '^./\.cache/' | sort)
exit $status

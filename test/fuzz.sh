#!/usr/bin/env bash
# make fuzz: every fuzz target (func FuzzXxx in a _test.go file) for
# FUZZTIME each (default 50000x: that many inputs, a few seconds), so
# that CI tries the parsers on inputs beyond their seeds. Longer:
# FUZZTIME=10m test/fuzz.sh, or one target:
# go test -run '^$' -fuzz '^FuzzParseID$' -fuzztime 10m ./volume
#
# The default is a count, not a duration: Go before 1.27 can fail a
# duration's run at its end with a bare "context deadline exceeded" and no
# failing input, when the machine is busy (golang/go#75804; a cold CI run
# failed so). A count has no deadline to race.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while IFS=: read -r file fn; do
  dir=./$(dirname "$file")
  echo "fuzz: $fn in $dir for ${FUZZTIME:-50000x}" >&2
  go test -run '^$' -fuzz "^$fn\$" -fuzztime "${FUZZTIME:-50000x}" "$dir" || status=1
done < <(git ls-files '*_test.go' | xargs grep -Ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/' | sort)
exit "$status"

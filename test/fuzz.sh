#!/usr/bin/env bash
# make fuzz: every fuzz target (func FuzzXxx in a _test.go file) for
# FUZZTIME each (default 5s), so that CI tries the parsers on inputs
# beyond their seeds. Longer: FUZZTIME=10m test/fuzz.sh, or one target:
# go test -run '^$' -fuzz '^FuzzParseID$' -fuzztime 10m ./volume
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while IFS=: read -r file fn; do
  dir=./$(dirname "$file")
  echo "fuzz: $fn in $dir for ${FUZZTIME:-5s}" >&2
  go test -run '^$' -fuzz "^$fn\$" -fuzztime "${FUZZTIME:-5s}" "$dir" || status=1
done < <(git ls-files '*_test.go' | xargs grep -Ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/' | sort)
exit "$status"

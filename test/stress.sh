#!/usr/bin/env bash
# make stress: the Go suites CI runs, several times over while busy loops
# keep every core of the machine occupied, so that a test whose outcome
# depends on scheduling or timing fails here before it fails CI.
#
#   STRESS_COUNT  repetitions of each test (go test -count), default 5
#   STRESS_PKGS   packages, default ./... (every one that starts MinIO or
#                 versitygw or mounts FUSE is among them)
#   STRESS_RUN    a -run pattern, to repeat only some tests
#   STRESS_LOAD   busy loops beside the tests, default one per core
#   STRESS_TIMEOUT  go test -timeout, default 4h
set -euo pipefail
cd "$(dirname "$0")/.."

count=${STRESS_COUNT:-5}
load=${STRESS_LOAD:-$(nproc)}
run=()
[ -n "${STRESS_RUN:-}" ] && run=(-run "$STRESS_RUN")

loaders=()
stop_load() { ((${#loaders[@]})) && kill "${loaders[@]}" 2>/dev/null; wait "${loaders[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for _ in $(seq "$load"); do
  (while :; do :; done) &
  loaders+=($!)
done

echo "stress: go test -race -count=$count ${run[*]} ${STRESS_PKGS:-./...} beside $load busy loops" >&2
start=$(date +%s)
status=0
# shellcheck disable=SC2086 # STRESS_PKGS is a list of packages
CGO_ENABLED=1 go test -race -count="$count" -timeout "${STRESS_TIMEOUT:-4h}" "${run[@]}" ${STRESS_PKGS:-./...} || status=$?
echo "stress: $(( $(date +%s) - start )) s, go test exited $status" >&2
exit "$status"

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

# Suites run by Ginkgo (csi-sanity) refuse -count above 1: they run
# count times over, one go test each.
all=() ginkgo=()
# shellcheck disable=SC2086 # STRESS_PKGS is a list of packages
while read -r pkg imports; do
  case " $imports " in
    *onsi/ginkgo*|*kubernetes-csi/csi-test*) ginkgo+=("$pkg") ;;
    *) all+=("$pkg") ;;
  esac
done < <(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ${STRESS_PKGS:-./...})

echo "stress: go test -race -count=$count ${run[*]} on ${#all[@]} packages, and ${#ginkgo[@]} Ginkgo suites $count times, beside $load busy loops" >&2
start=$(date +%s)
status=0
if ((${#all[@]})); then
  CGO_ENABLED=1 go test -race -count="$count" -timeout "${STRESS_TIMEOUT:-4h}" "${run[@]}" "${all[@]}" || status=$?
fi
if ((${#ginkgo[@]})); then
  for i in $(seq "$count"); do
    CGO_ENABLED=1 go test -race -count=1 -timeout "${STRESS_TIMEOUT:-4h}" "${run[@]}" "${ginkgo[@]}" || status=$?
  done
fi
echo "stress: $(( $(date +%s) - start )) s, exit $status" >&2
exit "$status"

#!/usr/bin/env bash
# make test: the Go tests (make unit), the fuzz targets (make fuzz), then
# the e2e suite and the upstream storage suite on a local cluster (make
# e2e). What the e2e run builds (test/local/build.sh all: Kubernetes, the
# images, the upstream suite; about half an hour of two cores when the Go
# caches are cold) is built meanwhile, at the lowest CPU priority: in the
# time the Go tests leave a CPU idle (a third or more, while they wait on
# FUSE round trips and MinIO), and taking as little of theirs as the
# scheduler allows. Once they end it builds at full priority, and the e2e
# run starts when it is done. Its output is in _output/prebuild.log; if it
# fails, the e2e run builds again and says why.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p _output
log=_output/prebuild.log

# setsid: a process group of its own (its ID is the PID), to renice and
# stop as one.
setsid nice -n 19 test/local/build.sh all >"$log" 2>&1 &
pre=$!
trap 'kill -- -"$pre" 2>/dev/null || true' EXIT

make unit
make fuzz

echo "test: the Go tests are done; waiting for the e2e run's builds (_output/prebuild.log)" >&2
renice --priority 0 -g "$pre" >/dev/null 2>&1 || true
if ! wait "$pre"; then
  echo "test: building for the e2e run failed; the e2e run builds again:" >&2
  tail -n 20 "$log" >&2
fi
trap - EXIT
make e2e

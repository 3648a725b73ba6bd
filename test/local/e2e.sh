#!/usr/bin/env bash
# make e2e: the e2e suite (test/e2e) on the local one-node cluster. It
# brings the cluster, MinIO and objfuse up as `make demo` does, runs the
# suite against it, and tears everything down again, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/local/env.sh
trap 'test/local/demo.sh down >/dev/null 2>&1 || true' EXIT
test/local/demo.sh
export KUBECONFIG=$KUBECONFIG_FILE
go test -tags e2e -count=1 -timeout 40m -v ./test/e2e

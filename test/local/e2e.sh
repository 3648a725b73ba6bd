#!/usr/bin/env bash
# make e2e: the e2e suite (test/e2e), then the upstream storage suite
# (test/conformance), on a local cluster of three nodes (OBJFUSE_NODES
# overrides). It brings the cluster, MinIO and objfuse up as `make demo`
# does, runs the suites against it, and tears everything down again,
# whatever happened.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OBJFUSE_NODES=${OBJFUSE_NODES:-3}
source test/local/env.sh
trap 'test/local/demo.sh down >/dev/null 2>&1 || true' EXIT
test/local/demo.sh
export KUBECONFIG=$KUBECONFIG_FILE
# The demo's pod has no controller: kubectl drain would refuse its node.
kc delete namespace objfuse-demo --timeout=120s
# Where the suite finds MinIO, and where servers it starts on this host
# are reached from the nodes.
export E2E_S3_ENDPOINT=$S3_ENDPOINT E2E_HOST_ADDR=$HOST_IP
export E2E_KUBECTL=$BIN_DIR/kubectl
go test -tags e2e -count=1 -timeout 40m -v ./test/e2e
test/conformance/run.sh

#!/usr/bin/env bash
# Where a Docker engine exists: a kind cluster (test/kind/kind.yaml) with
# objfuse's images loaded. Prints `export KUBECONFIG=...`. Deploy with
# `kubectl apply -k test/kind`; stop with test/kind/down.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export KUBECONFIG=$PWD/_output/kind/kubeconfig
mkdir -p _output/kind
kind get clusters 2>/dev/null | grep -qx objfuse ||
  kind create cluster --config test/kind/kind.yaml --kubeconfig "$KUBECONFIG" --wait 180s >&2
deploy/image/build.sh --no-import objfuse sidecars test minio
for img in objfuse objfuse-sidecars objfuse-test objfuse-minio; do
  kind load image-archive --name objfuse "_output/images/$img.tar" >&2
done
echo "export KUBECONFIG=$KUBECONFIG"

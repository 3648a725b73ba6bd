#!/usr/bin/env bash
# make conformance: the storage suite Kubernetes ships for CSI drivers
# (k8s.io/kubernetes test/e2e/storage/external) run against objfuse on the
# cluster of $KUBECONFIG, with objfuse deployed (deploy/kustomize/local:
# StorageClass objfuse-minio). No Docker and no registry needed.
#
#   test/conformance/run.sh [build|images|run|multivolume|snapshots]...   (default: all)
#
#   build   e2e.test (storage specs only) and the ginkgo CLI from this
#           folder's wrapper module, into $OUT/bin (about 15 minutes cold on
#           two cores; skipped while the binary is newer than its inputs,
#           REBUILD=1 forces it)
#   images  the suite's test images (agnhost built from the same module),
#           side-loaded into every node (images.sh)
#   run     the specs driver.yaml enables, GINKGO_PROCS (4) at a time; the
#           report (ginkgo.log, report.json, junit.xml, summary.txt) goes to
#           $OUT/report/<time>/
#   multivolume  the multiVolume specs as well ([Slow], about a minute),
#           the ones that need two nodes among them
#   snapshots  the [Feature:VolumeSnapshotDataSource] specs (not [Slow])
#
# The selection is the upstream default for a CI run: External Storage, and
# nothing Slow, Disruptive (restarts kubelet over SSH), Serial, or behind a
# [Feature:...] tag (XFS, SELinux, Windows, VolumeAttributesClass; the
# snapshot specs run in a pass of their own).
# CONFORMANCE_FOCUS and CONFORMANCE_SKIP replace the regexps, GINKGO_FLAGS
# adds ginkgo flags (e.g. --dry-run -v: list the selection); e.g. every
# [Slow] spec: CONFORMANCE_SKIP='\[Disruptive\]|\[Serial\]|\[Feature:' \
# test/conformance/run.sh run
set -euo pipefail
cd "$(dirname "$0")"
CONF=$PWD
REPO=$(cd ../.. && pwd)
OUT=${OBJFUSE_CONFORMANCE_OUT:-$REPO/_output/conformance}
BIN=$OUT/bin
export OBJFUSE_CONFORMANCE_OUT=$OUT
FOCUS=${CONFORMANCE_FOCUS:-External.Storage}
SKIP=${CONFORMANCE_SKIP:-'\[Slow\]|\[Disruptive\]|\[Serial\]|\[Feature:'}
PROCS=${GINKGO_PROCS:-4}
TIMEOUT=${CONFORMANCE_TIMEOUT:-2h}
export KUBECONFIG=${KUBECONFIG:-${OBJFUSE_CLUSTER_DIR:-/var/lib/objfuse-cluster}/admin.kubeconfig}
# Some specs exec into pods through kubectl: the cluster's own release if
# test/local built it, else whatever is on PATH.
KUBECTL=${KUBECTL:-${OBJFUSE_LOCAL_BIN:-$REPO/_output/local/bin}/kubectl}
[ -x "$KUBECTL" ] || KUBECTL=$(command -v kubectl || true)
export CGO_ENABLED=0

log() { printf '%s conformance: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# version MODULE: the version go.mod pins.
version() { go list -m -f '{{.Version}}' "$1"; }

# stale BINARY: BINARY is missing or older than what it is built from.
stale() {
  local f
  [ -z "${REBUILD:-}" ] && [ -x "$1" ] || return 0
  for f in go.mod go.sum *.go; do [ "$1" -nt "$f" ] || return 0; done
  return 1
}

build() {
  mkdir -p "$BIN"
  if stale "$BIN/e2e.test"; then
    log "building e2e.test (storage specs of k8s.io/kubernetes $(version k8s.io/kubernetes); about 15 minutes cold)"
    # Built aside and moved: a build stopped midway (test/all.sh stops
    # its background one) leaves no binary newer than its inputs.
    go test -c -vet=off -ldflags "-X k8s.io/component-base/version.gitVersion=$(version k8s.io/kubernetes)" -o "$BIN/e2e.test.new" .
    mv "$BIN/e2e.test.new" "$BIN/e2e.test"
  fi
  if stale "$BIN/ginkgo"; then
    go build -o "$BIN/ginkgo.new" github.com/onsi/ginkgo/v2/ginkgo
    mv "$BIN/ginkgo.new" "$BIN/ginkgo"
  fi
  log "built: $("$BIN/e2e.test" -version) e2e.test, $("$BIN/ginkgo" version) in $BIN"
}

# preflight: the cluster answers and has what driver.yaml names.
preflight() {
  [ -n "$KUBECTL" ] || die "no kubectl (set KUBECTL)"
  [ -f "$KUBECONFIG" ] || die "no kubeconfig at $KUBECONFIG (start a cluster: test/local/up.sh 3)"
  "$KUBECTL" get --request-timeout=10s nodes >/dev/null || die "the cluster of $KUBECONFIG does not answer"
  local sc vsc
  sc=$(sed -n '/^StorageClass:/,/^[^ #]/s/^ *FromExistingClassName: *//p' driver.yaml)
  vsc=$(sed -n '/^SnapshotClass:/,/^[^ #]/s/^ *FromExistingClassName: *//p' driver.yaml)
  "$KUBECTL" get storageclass "$sc" >/dev/null || die "StorageClass $sc is missing: deploy objfuse (deploy/kustomize/local)"
  "$KUBECTL" get volumesnapshotclass "$vsc" >/dev/null || die "VolumeSnapshotClass $vsc is missing: deploy objfuse (deploy/kustomize/local, after the snapshot CRDs)"
  log "cluster: $("$KUBECTL" get nodes --no-headers | grep -cw Ready) Ready nodes; StorageClass $sc, VolumeSnapshotClass $vsc"
}

# run [FOCUS SKIP]: the specs of the selection (default: FOCUS and SKIP).
run() {
  local focus=${1:-$FOCUS} skip=${2:-$SKIP}
  preflight
  local report
  report=$OUT/report/$(date +%Y%m%d-%H%M%S)
  mkdir -p "$report"
  log "running: focus '$focus', skip '$skip', $PROCS processes; report in $report"
  local rc=0
  # ginkgo checks its own version with `go list -m` in the binary's folder,
  # which is objfuse's module, not this one: GO111MODULE=off keeps it from
  # warning about objfuse's ginkgo. GINKGO_FLAGS are split on purpose.
  # shellcheck disable=SC2086
  GO111MODULE=off "$BIN/ginkgo" --procs="$PROCS" --timeout="$TIMEOUT" --no-color ${GINKGO_FLAGS:-} \
    --focus="$focus" --skip="$skip" \
    --output-dir="$report" --json-report=report.json --junit-report=junit.xml \
    "$BIN/e2e.test" -- \
    -storage.testdriver="$CONF/driver.yaml" -provider=skeleton \
    -kubeconfig="$KUBECONFIG" -kubectl-path="$KUBECTL" \
    -e2e-output-dir="$report" 2>&1 | tee "$report/ginkgo.log" || rc=$?
  summary "$report" | tee "$report/summary.txt"
  return "$rc"
}

# summary REPORT: the counts, each failure with its message, and the
# skips grouped by reason (the first line of each skip message).
summary() {
  local json=$1/report.json
  echo "== summary ($1)"
  grep -E '^Ran [0-9]+ of [0-9]+ Specs|Passed \| [0-9]+ Failed' "$1/ginkgo.log" || true
  [ -f "$json" ] || return 0
  echo "-- failed"
  jq -r '.[].SpecReports[]? | select(.LeafNodeType == "It" and (.State == "failed" or .State == "panicked" or .State == "timedout"))
    | "* " + ((.ContainerHierarchyTexts // []) + [.LeafNodeText] | join(" ")) + "\n    "
      + (.Failure.Message | gsub("\\s+"; " ") | .[0:300]) + " (" + (.Failure.Location.FileName | split("/") | .[-1]) + ":" + (.Failure.Location.LineNumber | tostring) + ")"' "$json"
  echo "-- skipped, by reason"
  jq -r '.[].SpecReports[]? | select(.LeafNodeType == "It" and .State == "skipped" and .Failure != null)
    | .Failure.Message | split("\n")[0]' "$json" |
    sed -E 's/"?[a-z0-9.-]+\.csi\.[a-z]+"?/DRIVER/g' | sort | uniq -c | sort -rn
}

command -v jq >/dev/null || {
  log "installing jq (the summary reads the JSON report)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends jq >/dev/null
}
steps=("$@")
((${#steps[@]})) || steps=(build images run multivolume snapshots)
for s in "${steps[@]}"; do
  case $s in
    build) build ;;
    images) "$CONF/images.sh" ;;
    run) run ;;
    # The multiVolume specs, [Slow] but about a minute: several volumes
    # per pod, one volume in several pods, on one node and across nodes.
    multivolume) run 'External.Storage.*multiVolume' '\[Disruptive\]|\[Serial\]|\[Feature:' ;;
    # The snapshot specs, which the first run's skip of [Feature:...]
    # leaves out: snapshots taken, restored, deleted (not [Slow] ones).
    snapshots) run 'External.Storage.*\[Feature:VolumeSnapshotDataSource\]' '\[Slow\]|\[Disruptive\]|\[Serial\]' ;;
    *) echo "usage: $0 [build|images|run|multivolume|snapshots]..." >&2; exit 2 ;;
  esac
done

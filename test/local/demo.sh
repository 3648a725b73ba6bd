#!/usr/bin/env bash
# make demo / make demo-down.
#
# demo: a cluster (kind when a Docker engine answers, otherwise the local
# cluster of test/local: one node unless OBJFUSE_NODES says more), objfuse's images, MinIO and objfuse from
# the local overlay, then a PVC and a pod that writes files through the
# mount and reads them back; prints the pod's log and the objects as MinIO
# sees them, and leaves everything running to look around.
# down: deletes the demo (and its bucket), objfuse and MinIO, then the
# cluster.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

T0=$(date +%s)
TL=$T0
step() {
  local now; now=$(date +%s)
  printf '\n==> %s  (+%ss, %ss total)\n' "$*" $((now - TL)) $((now - T0)) >&2
  TL=$now
}

MODE=local
if command -v docker >/dev/null && docker info >/dev/null 2>&1 && command -v kind >/dev/null; then
  MODE=kind
fi
if [ "$MODE" = kind ]; then
  OVERLAY=test/kind
  KUBECTL=kubectl
  export KUBECONFIG=$REPO_ROOT/_output/kind/kubeconfig
else
  OVERLAY=deploy/kustomize/local
  KUBECTL=$BIN_DIR/kubectl
  export KUBECONFIG=$KUBECONFIG_FILE
fi
k() { "$KUBECTL" "$@"; }
s3() { go run ./test/local/s3 "$@"; }

# rollout KIND/NAME SECONDS: waits for a Deployment or DaemonSet, showing
# why it is not ready if it does not become so.
rollout() {
  if ! k -n objfuse-system rollout status "$1" --timeout="${2}s" >&2; then
    k -n objfuse-system get pods -o wide >&2
    k -n objfuse-system describe "$1" >&2 | tail -n 20
    for p in $(k -n objfuse-system get pods -o name); do
      k -n objfuse-system describe "$p" | sed -n '/^Events:/,$p' >&2
      k -n objfuse-system logs "$p" --all-containers --tail=20 >&2 || true
    done
    return 1
  fi
}

down() {
  if [ "$MODE" = kind ]; then
    test/kind/down.sh
    return
  fi
  if alive kube-apiserver && alive kubelet; then
    if k get namespace objfuse-demo >/dev/null 2>&1; then
      step "deleting the demo (its PVC, then its bucket)"
      local pvs
      pvs=$(k get pvc -n objfuse-demo -o 'jsonpath={.items[*].spec.volumeName}' 2>/dev/null || true)
      k delete namespace objfuse-demo --timeout=120s || true
      for pv in $pvs; do
        k wait --for=delete "pv/$pv" --timeout=120s || echo "PV $pv was not deleted (its bucket may remain)" >&2
      done
    fi
    step "deleting objfuse and MinIO"
    k delete -k "$OVERLAY" --ignore-not-found --timeout=120s >/dev/null || true
  fi
  step "stopping the cluster"
  test/local/down.sh
}

if [ "${1:-}" = down ]; then
  down
  exit
fi

# --- cluster and images -----------------------------------------------------
if [ "$MODE" = kind ]; then
  step "kind cluster and images (Docker answers)"
  test/kind/up.sh >/dev/null
else
  step "local cluster of $NODES node(s) (no Docker engine here)"
  test/local/up.sh >/dev/null
  step "images: build and import into containerd"
  deploy/image/build.sh all
fi

# --- MinIO and objfuse --------------------------------------------------------
step "deploying MinIO and objfuse ($OVERLAY)"
# The snapshot CRDs first: the overlay holds a VolumeSnapshotClass. They
# come from the external-snapshotter module deploy/image/snapshotter pins.
crds=$(cd deploy/image/snapshotter && go mod download github.com/kubernetes-csi/external-snapshotter/client/v8 &&
  go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8)/config/crd
k apply -f "$crds/snapshot.storage.k8s.io_volumesnapshotclasses.yaml" -f "$crds/snapshot.storage.k8s.io_volumesnapshotcontents.yaml" \
  -f "$crds/snapshot.storage.k8s.io_volumesnapshots.yaml" >&2
k wait --for condition=established --timeout=60s crd/volumesnapshotclasses.snapshot.storage.k8s.io \
  crd/volumesnapshotcontents.snapshot.storage.k8s.io crd/volumesnapshots.snapshot.storage.k8s.io >&2
existed=$(k -n objfuse-system get deployment/objfuse-controller daemonset/objfuse-node -o name 2>/dev/null || true)
# attachRequired is immutable: a CSIDriver of an objfuse that let
# Kubernetes attach (true) goes first (README, "How long a pod waits").
if [ "$(k get csidriver objfuse.csi.io -o 'jsonpath={.spec.attachRequired}' 2>/dev/null)" = true ]; then
  k delete csidriver objfuse.csi.io >&2
fi
k apply -k "$OVERLAY" >&2
if [ -n "$existed" ]; then
  # Same tag, new image: restart the driver's pods so they run it.
  k -n objfuse-system rollout restart $existed >&2
fi
rollout deployment/minio 180
s3 wait
s3 mb shared # the objfuse-minio-shared StorageClass's bucket
rollout daemonset/objfuse-node 180
rollout deployment/objfuse-controller 180
deadline=$(($(date +%s) + 60))
for node in $(k get nodes -o name); do
  until k get csinode "${node#node/}" -o 'jsonpath={.spec.drivers[*].name}' 2>/dev/null | grep -qw objfuse.csi.io; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "objfuse.csi.io did not register with ${node#node/}'s kubelet" >&2; exit 1; }
    sleep 0.5
  done
done

# --- the demo -----------------------------------------------------------------
step "a PVC (StorageClass objfuse-minio: a bucket per volume) and a pod using it"
# The pod only once its PVC is bound: a pod created first is marked
# unschedulable ("unbound immediate PersistentVolumeClaims"), and when the
# bind lands before that, the scheduler only looks at it again after its
# five-minute flush of unschedulable pods.
k apply -f test/local/demo.yaml -l 'app!=objfuse-demo' >&2
deadline=$(($(date +%s) + 120))
until [ "$(k get pvc -n objfuse-demo demo-bucket -o 'jsonpath={.status.phase}' 2>/dev/null)" = Bound ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "the demo PVC was not bound:" >&2
    k describe pvc -n objfuse-demo demo-bucket | sed -n '/^Events:/,$p' >&2
    k logs -n objfuse-system deploy/objfuse-controller --all-containers --tail=30 >&2 || true
    exit 1
  fi
  sleep 0.5
done
k apply -f test/local/demo.yaml >&2
deadline=$(($(date +%s) + 180))
until k logs -n objfuse-demo demo 2>/dev/null | grep -q '^demo: done'; do
  phase=$(k get pod -n objfuse-demo demo -o 'jsonpath={.status.phase}' 2>/dev/null || true)
  if [ "$(date +%s)" -ge "$deadline" ] || [ "$phase" = Failed ]; then
    echo "the demo pod did not finish (phase ${phase:-unknown}):" >&2
    k get pvc,pod -n objfuse-demo -o wide >&2
    k describe pvc -n objfuse-demo demo-bucket | sed -n '/^Events:/,$p' >&2
    k describe pod -n objfuse-demo demo | sed -n '/^Events:/,$p' >&2
    k get volumeattachments,pods -n objfuse-system -o wide >&2
    k logs -n objfuse-demo demo >&2 || true
    k logs -n objfuse-system deploy/objfuse-controller --all-containers --tail=30 >&2 || true
    k logs -n objfuse-system ds/objfuse-node --tail=30 >&2 || true
    exit 1
  fi
  sleep 1
done

step "what happened"
pv=$(k get pvc -n objfuse-demo demo-bucket -o 'jsonpath={.spec.volumeName}')
bucket=$(k get pv "$pv" -o 'jsonpath={.spec.csi.volumeAttributes.bucket}')
echo "--- the pod's log (kubectl logs -n objfuse-demo demo):"
k logs -n objfuse-demo demo
echo "--- PVC, PV, VolumeAttachment and the volume's mounter pod:"
k get pvc -n objfuse-demo
k get pv "$pv"
k get volumeattachments
k get pods -n objfuse-system -o wide
echo "--- the bucket $bucket as MinIO sees it (go run ./test/local/s3 ls $bucket):"
s3 ls "$bucket"
echo "--- s3://$bucket/hello.txt:"
s3 cat "$bucket" hello.txt
echo "--- sha256 of s3://$bucket/random.bin (compare with the pod's log): $(s3 cat "$bucket" random.bin | sha256sum | cut -d' ' -f1)"
step "demo done"
cat <<EOF
Look around:
  export KUBECONFIG=$KUBECONFIG
  $KUBECTL get pods -A -o wide
  $KUBECTL exec -n objfuse-demo demo -- ls -l /data
  $KUBECTL exec -n objfuse-demo demo -- sh -c 'echo more > /data/more.txt'
  go run ./test/local/s3 ls $bucket
  go test -tags e2e ./test/e2e      # the e2e suite against this cluster
Tear down: make demo-down
EOF

# Shared settings of test/local/up.sh and down.sh (sourced, not run).
# Every path and address of the local one-node cluster is here.

LOCAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$LOCAL_DIR/../.." && pwd)

KUBE_VERSION=v1.33.13
# The cluster's own directory: bind-mounted onto itself and made rshared so
# mounts made in pods (CSI staging, FUSE) propagate. kubelet's root dir and
# containerd's root and state live inside it. deploy/kustomize/local names
# the kubelet dir, so it is fixed.
CLUSTER_DIR=${OBJFUSE_CLUSTER_DIR:-/var/lib/objfuse-cluster}
KUBELET_DIR=$CLUSTER_DIR/kubelet
PKI=$CLUSTER_DIR/pki
PIDS=$CLUSTER_DIR/pids
SAVED=$CLUSTER_DIR/saved
CONTAINERD_SOCK=$CLUSTER_DIR/containerd/containerd.sock
KUBECONFIG_FILE=$CLUSTER_DIR/admin.kubeconfig
# The driver's state dir (hostPath in the node plugin and mounter pods):
# also made a shared mount, as Bidirectional propagation requires.
OBJFUSE_STATE_DIR=/var/lib/objfuse
# Binaries and logs outlive the cluster (gitignored).
BIN_DIR=${OBJFUSE_LOCAL_BIN:-$REPO_ROOT/_output/local/bin}
LOG_DIR=${OBJFUSE_LOCAL_LOGS:-$REPO_ROOT/_output/local/logs}

APISERVER=https://127.0.0.1:6443
ETCD_CLIENT=http://127.0.0.1:2379
ETCD_PEER=http://127.0.0.1:2380
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
POD_CIDR=10.244.0.0/24
BRIDGE=objfuse0
# Pods on the bridge reach host processes (and hostNetwork pods) here.
BRIDGE_IP=10.244.0.1
NODE_NAME=${OBJFUSE_NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
PAUSE_IMAGE=objfuse-pause:v0.1.0-dev

# Host sysctls kubelet sets; down.sh puts the saved values back.
KUBELET_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
# Host paths the components use whatever their flags say; down.sh removes
# the ones that did not exist before up.sh.
FIXED_PATHS="/var/lib/kubelet /var/log/pods /var/log/containers /run/containerd /run/netns /var/lib/cni $OBJFUSE_STATE_DIR"

export CONTAINERD_ADDRESS=$CONTAINERD_SOCK
export CONTAINERD_NAMESPACE=k8s.io

log() { printf '%s local-cluster: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# kc runs kubectl as cluster admin.
kc() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# alive NAME: the recorded process NAME is running (and is still ours:
# same executable as recorded).
alive() {
  local f=$PIDS/$1.pid pid exe
  [ -f "$f" ] || return 1
  read -r pid exe <"$f"
  [ -n "$pid" ] && [ -d /proc/$pid ] || return 1
  [ "$(readlink /proc/$pid/exe 2>/dev/null)" = "$exe" ]
}

# cluster_mounts lists mount points at or under DIR, deepest first.
mounts_under() {
  awk -v d="$1" '{ m=$5; gsub(/\\040/, " ", m); if (m == d || index(m, d "/") == 1) print m }' /proc/self/mountinfo |
    awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2- | uniq
}

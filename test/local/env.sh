# Shared settings of the local cluster's scripts (sourced, not run).
# Every path and address of the local cluster is here.
#
# The control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) runs as host processes. Each node is its own set of
# namespaces on this machine (test/local/node.sh): its own PID, mount, UTS
# and network namespace, its own containerd and kubelet, and the standard
# paths (/var/lib/kubelet, /var/log/pods, /run/containerd, ...) bound to
# that node's own directory, so that what runs on a node sees it as a
# machine of its own.

LOCAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$LOCAL_DIR/../.." && pwd)

KUBE_VERSION=v1.33.13
# The cluster's own directory: PKI, kubeconfigs, etcd, and a directory per
# node (nodes/N) holding what that node keeps on its disk.
CLUSTER_DIR=${OBJFUSE_CLUSTER_DIR:-/var/lib/objfuse-cluster}
PKI=$CLUSTER_DIR/pki
PIDS=$CLUSTER_DIR/pids
SAVED=$CLUSTER_DIR/saved
KUBECONFIG_FILE=$CLUSTER_DIR/admin.kubeconfig
# How many nodes up.sh starts (up.sh N overrides; the number started is
# kept in $CLUSTER_DIR/nodes/count, which up.sh checks a request against).
NODES=${OBJFUSE_NODES:-$(cat "$CLUSTER_DIR/nodes/count" 2>/dev/null || echo 1)}
# Inside a node, kubelet's root dir and the driver's state dir (hostPath in
# the node plugin and mounter pods) are at their standard places.
KUBELET_DIR=/var/lib/kubelet
OBJFUSE_STATE_DIR=/var/lib/objfuse
# Binaries and logs outlive the cluster (gitignored).
BIN_DIR=${OBJFUSE_LOCAL_BIN:-$REPO_ROOT/_output/local/bin}
LOG_DIR=${OBJFUSE_LOCAL_LOGS:-$REPO_ROOT/_output/local/logs}

# The nodes' network: a host bridge, the host at HOST_IP on it, node N at
# NODE_NET.(10+N). Pod CIDR of node N: 10.244.N.0/24, routed by the nodes
# to each other (no overlay, no NAT, nothing leaves this machine). The
# API server listens on the host's address there, where every node and
# hostNetwork pod reaches it (deploy/kustomize/local says so too).
NODE_NET=10.243.0
HOST_IP=$NODE_NET.1
NODE_BRIDGE=objfuse-nodes
APISERVER=https://$HOST_IP:6443
ETCD_CLIENT=http://127.0.0.1:2379
ETCD_PEER=http://127.0.0.1:2380
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
CLUSTER_CIDR=10.244.0.0/16
PAUSE_IMAGE=objfuse-pause:v0.1.0-dev

# Node N's name, address, pod CIDR, directory and containerd socket.
node_name() { echo "objfuse-node-$1"; }
node_ip() { echo "$NODE_NET.$((10 + $1))"; }
node_pod_cidr() { echo "10.244.$1.0/24"; }
node_dir() { echo "$CLUSTER_DIR/nodes/$1"; }
node_containerd_sock() { echo "$(node_dir "$1")/run/containerd/containerd.sock"; }
# node_veth N: the host's end of node N's link to the nodes' bridge.
node_veth() { echo "ofn$1"; }
# started_nodes: the numbers of the nodes started (a PID file each),
# whatever count anyone asks for now.
started_nodes() {
  local f
  for f in "$PIDS"/objfuse-node-*.pid; do [ -e "$f" ] && { f=${f%.pid}; echo "${f##*-}"; }; done
  return 0
}
# The node's standard paths and where each is bound from under its node_dir.
NODE_PATHS="/var/lib/kubelet:kubelet /var/lib/objfuse:objfuse /var/log/pods:log/pods /var/log/containers:log/containers /var/lib/cni:cni /run/containerd:run/containerd /run/netns:run/netns"

# The local MinIO (deploy/kustomize/local/minio.yaml: on node 1's network),
# for test/local/s3 and the e2e suite.
export S3_ENDPOINT=http://$(node_ip 1):9000

# Host sysctls kubelet sets; down.sh puts the saved values back.
KUBELET_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
# Host directories made as mount points for NODE_PATHS; down.sh removes the
# ones that did not exist before up.sh.
FIXED_PATHS=$(for p in $NODE_PATHS; do printf '%s ' "${p%%:*}"; done)

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

#!/usr/bin/env bash
# PID 1 of local node N (test/local/node.sh starts it in fresh PID, mount,
# UTS and network namespaces): makes the namespaces look like a machine of
# its own, then runs the node's containerd and kubelet until told to stop.
#
# - mounts: the node's directory is bound onto the standard paths
#   (NODE_PATHS: /var/lib/kubelet, /run/containerd, ...) and made rshared,
#   so that Bidirectional mount propagation from pods (CSI staging, FUSE)
#   works inside the node. The namespace's mounts are private: nothing a
#   node mounts reaches the host or another node, and a node that dies
#   takes its mounts with it, as a machine that loses power does.
# - network: eth0 (the host puts it in) on the nodes' bridge, a pod bridge
#   with this node's pod CIDR, routes to the other nodes' pod CIDRs.
# - a kubelet that exits is started again (node.sh restart-kubelet stops it
#   to restart it); SIGTERM stops the node: kubelet, containerd, then every
#   process left in the namespace.
set -euo pipefail
N=$1
source "$(dirname "$0")/env.sh"
NAME=$(node_name "$N")
ND=$(node_dir "$N")
IP=$(node_ip "$N")
POD_CIDR=$(node_pod_cidr "$N")
ilog() { printf '%s %s: %s\n' "$(date +%T)" "$NAME" "$*"; }

# As PID 1 of its namespace, this shell ignores SIGTERM until it has a
# handler: set it first, so that a node stopped while it starts stops.
stopping= containerd_pid= kubelet_loop=
stop_node() {
  stopping=1
  ilog "stopping"
  [ -z "$kubelet_loop" ] || kill -TERM "$kubelet_loop" 2>/dev/null || true
  pkill -TERM -x kubelet 2>/dev/null || true
  if [ -n "$containerd_pid" ]; then
    kill -TERM "$containerd_pid" 2>/dev/null || true
    local deadline=$(($(date +%s) + 15))
    while kill -0 "$containerd_pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
  fi
  # Everything else in the node (shims, containers): as a power-off would.
  kill -KILL -1 2>/dev/null || true
  exit 0
}
trap stop_node TERM INT

hostname "$NAME"

# --- mounts -------------------------------------------------------------------
# The namespace began as a copy of the host's mounts: drop the copies of
# FUSE mounts, whose connections the copy would otherwise keep open (a
# test on the host unmounting its own would wait for them forever).
awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i+1) ~ /^fuse/) print $5; break } }' /proc/self/mountinfo |
  sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
# What the node kept in memory (/run) is gone, as after a reboot.
rm -rf "$ND/run"
mount --bind "$ND" "$ND"
mount --make-rshared "$ND"
for p in $NODE_PATHS; do
  mkdir -p "$ND/${p#*:}"
  mount --bind "$ND/${p#*:}" "${p%%:*}"
done

# --- network --------------------------------------------------------------
ip link set lo up
deadline=$(($(date +%s) + 30))
until ip link show eth0 >/dev/null 2>&1; do
  [ "$(date +%s)" -lt "$deadline" ] || { ilog "no eth0 after 30s"; exit 1; }
  sleep 0.1
done
ip addr add "$IP/24" dev eth0
ip link set eth0 up
sysctl -q -w net.ipv4.ip_forward=1
for ((m = 1; m <= NODES; m++)); do
  [ "$m" = "$N" ] || ip route add "$(node_pod_cidr "$m")" via "$(node_ip "$m")"
done
# Without kube-proxy, Service IPs lead nowhere: fail fast.
ip route add blackhole "$SERVICE_CIDR"
mkdir -p "$ND/cni-conf"
cat >"$ND/cni-conf/10-objfuse.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "objfuse-local",
  "plugins": [{
    "type": "bridge",
    "bridge": "objfuse0",
    "isGateway": true,
    "isDefaultGateway": false,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "${POD_CIDR%.*}.10"}]],
      "routes": [{"dst": "$NODE_NET.0/24"}, {"dst": "$CLUSTER_CIDR"}]
    }
  }]
}
EOF

# --- containerd -----------------------------------------------------------
cat >"$ND/containerd.toml" <<EOF
version = 2
root = "$ND/containerd"
state = "/run/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$ND/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This VM lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ND/cni-conf"
EOF
containerd --config "$ND/containerd.toml" >>"$LOG_DIR/$NAME-containerd.log" 2>&1 &
containerd_pid=$!

# --- kubelet --------------------------------------------------------------
cat >"$ND/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
# Each node's pods in a cgroup subtree of their own (up.sh makes it).
cgroupRoot: /$NAME
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $IP
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
# Images are imported, never pulled: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
makeIPTablesUtilChains: false
serializeImagePulls: false
EOF
run_kubelet() {
  while [ -z "$stopping" ]; do
    "$BIN_DIR/kubelet" --config="$ND/kubelet-config.yaml" \
      --kubeconfig="$CLUSTER_DIR/$NAME.kubeconfig" --root-dir=/var/lib/kubelet \
      --hostname-override="$NAME" --node-ip="$IP" --v=1 >>"$LOG_DIR/$NAME-kubelet.log" 2>&1 || true
    [ -n "$stopping" ] || ilog "kubelet exited; starting it again"
  done
}
run_kubelet &
kubelet_loop=$!

ilog "up (ip $IP, pod CIDR $POD_CIDR)"
# As PID 1, bash reaps every orphan that lands here while it waits.
while :; do
  sleep 3600 &
  wait $! || true
done

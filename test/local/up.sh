#!/usr/bin/env bash
# Starts a real Kubernetes of N nodes (default 1) on this machine without
# Docker: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
# as host processes; each node its own namespaces with its own containerd
# and kubelet (test/local/node.sh); routed pod networks, no overlay, no
# kube-proxy and no DNS. Kubernetes is built from the Go module proxy
# through the wrapper module in test/local/kube. Every PID is recorded;
# test/local/down.sh stops them and puts the host back as it was. Needs
# root. Idempotent: a running cluster of the same size is left alone.
#
#   test/local/up.sh [N] && export KUBECONFIG=/var/lib/objfuse-cluster/admin.kubeconfig
set -euo pipefail
source "$(dirname "$0")/env.sh"

[ "$(id -u)" = 0 ] || die "run as root"
T0=$(date +%s)
if [ $# -ge 1 ]; then NODES=$1; fi
[[ "$NODES" =~ ^[1-9]$ ]] || die "the node count must be 1 to 9, not '$NODES'"
if [ -f "$CLUSTER_DIR/nodes/count" ] && [ "$(cat "$CLUSTER_DIR/nodes/count")" != "$NODES" ]; then
  die "a cluster of $(cat "$CLUSTER_DIR/nodes/count") nodes exists; stop it first (test/local/down.sh)"
fi

# wait_for DESC SECONDS PROCESS CMD...: polls CMD until it succeeds, failing
# at the deadline or as soon as the recorded PROCESS ("-" for none) exits.
wait_for() {
  local desc=$1 secs=$2 proc=$3; shift 3
  local deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$proc" != - ] && ! alive "$proc"; then
      tail -n 30 "$LOG_DIR/$proc.log" >&2 || true
      die "$proc exited while waiting for $desc (log: $LOG_DIR/$proc.log)"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      [ "$proc" != - ] && tail -n 30 "$LOG_DIR/$proc.log" >&2
      die "timed out after ${secs}s waiting for $desc"
    fi
    sleep 0.5
  done
}

# start NAME BINARY ARGS...: runs a component in its own session, logging
# to $LOG_DIR/NAME.log, and records "PID executable" in $PIDS/NAME.pid.
start() {
  local name=$1 bin=$2; shift 2
  if alive "$name"; then return; fi
  : >"$LOG_DIR/$name.log"
  setsid "$bin" "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo "$! $(readlink -f "$bin")" >"$PIDS/$name.pid"
  log "started $name (pid $!)"
}

# --- host packages ---------------------------------------------------------
need=()
for p in containerd:containerd runc:runc containernetworking-plugins:/usr/lib/cni/bridge \
  etcd-server:etcd busybox-static:/bin/busybox iptables:iptables openssl:openssl \
  curl:curl iproute2:ip util-linux:nsenter; do
  command -v "${p#*:}" >/dev/null 2>&1 || [ -x "${p#*:}" ] || need+=("${p%%:*}")
done
if ((${#need[@]})); then
  log "installing ${need[*]}"
  apt-get update -qq
  # policy-rc.d keeps Debian from starting its own containerd/etcd services.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || log "warning: /dev/fuse is missing; FUSE mounts will fail"

# --- Kubernetes binaries -------------------------------------------------
mkdir -p "$BIN_DIR" "$LOG_DIR"
"$LOCAL_DIR/build.sh" kube

# --- already running? -----------------------------------------------------
nodes_ready() {
  [ "$(kc get nodes -o 'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -cx True)" = "$NODES" ]
}
all_alive=1
for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  alive "$c" || all_alive=
done
for ((n = 1; n <= NODES; n++)); do alive "$(node_name $n)" || all_alive=; done
if [ -n "$all_alive" ] && nodes_ready; then
  log "already running"
  echo "export KUBECONFIG=$KUBECONFIG_FILE"
  exit 0
fi

# --- remember the host as it was -----------------------------------------
mkdir -p "$CLUSTER_DIR" "$PIDS"
if [ ! -d "$SAVED" ]; then
  mkdir -p "$SAVED"
  for s in $KUBELET_SYSCTLS; do echo "$s=$(sysctl -n "$s")"; done >"$SAVED/sysctls"
  for p in $FIXED_PATHS; do [ -e "$p" ] && echo "$p"; done >"$SAVED/paths" || true
  for t in filter nat mangle; do
    for ipt in iptables ip6tables; do
      $ipt -t $t -S 2>/dev/null | awk -v t=$t -v i=$ipt '$1 == "-N" { print i, t, $2 }'
    done
  done >"$SAVED/chains"
fi
mkdir -p "$PKI" "$CLUSTER_DIR/etcd" "$CLUSTER_DIR/nodes"
echo "$NODES" >"$CLUSTER_DIR/nodes/count"
# Mount points for the nodes' own directories (node-init.sh binds them).
for p in $FIXED_PATHS; do mkdir -p "$p"; done

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
# cert NAME SUBJECT EXTENDED-KEY-USAGE [SANS]
cert() {
  local name=$1 subj=$2 eku=$3 sans=${4:-}
  [ -s "$PKI/$name.crt" ] && return
  newkey "$PKI/$name.key"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -n "$sans" ] && echo "subjectAltName=$sans"
  } >"$PKI/$name.ext"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}
if [ ! -s "$PKI/ca.crt" ]; then
  newkey "$PKI/ca.key"
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=objfuse-local-ca" -days 3650 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/ca.crt" 2>/dev/null
fi
[ -s "$PKI/sa.key" ] || { newkey "$PKI/sa.key" && openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null; }
cert apiserver "/CN=kube-apiserver" serverAuth \
  "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$SERVICE_IP,IP:$HOST_IP"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=objfuse-local-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
for ((n = 1; n <= NODES; n++)); do
  cert "$(node_name $n)" "/O=system:nodes/CN=system:node:$(node_name $n)" clientAuth
done

kubeconfig() { # NAME CERT -> $CLUSTER_DIR/NAME.kubeconfig
  cat >"$CLUSTER_DIR/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: objfuse-local
  cluster: {server: $APISERVER, certificate-authority: $PKI/ca.crt}
users:
- name: $2
  user: {client-certificate: $PKI/$2.crt, client-key: $PKI/$2.key}
contexts:
- name: objfuse-local
  context: {cluster: objfuse-local, user: $2}
current-context: objfuse-local
EOF
  chmod 600 "$CLUSTER_DIR/$1.kubeconfig"
}
kubeconfig admin admin
kubeconfig controller-manager controller-manager
kubeconfig scheduler scheduler
for ((n = 1; n <= NODES; n++)); do kubeconfig "$(node_name $n)" "$(node_name $n)"; done

# --- network: the nodes' bridge, the host on it ---------------------------
if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
  ip link add "$NODE_BRIDGE" type bridge
  ip addr add "$HOST_IP/24" dev "$NODE_BRIDGE"
fi
ip link set "$NODE_BRIDGE" up
# Without kube-proxy, Service IPs lead nowhere: fail fast rather than
# leaking to the default route.
ip route show type blackhole | grep -q "^blackhole $SERVICE_CIDR" || ip route add blackhole "$SERVICE_CIDR"
# --- etcd -------------------------------------------------------------------
start etcd "$(command -v etcd)" --name objfuse-local --data-dir "$CLUSTER_DIR/etcd" \
  --listen-client-urls "$ETCD_CLIENT" --advertise-client-urls "$ETCD_CLIENT" \
  --listen-peer-urls "$ETCD_PEER" --initial-advertise-peer-urls "$ETCD_PEER" \
  --initial-cluster "objfuse-local=$ETCD_PEER" --logger zap --log-level warn
wait_for "etcd" 60 etcd curl -sf "$ETCD_CLIENT/health"

# --- control plane ----------------------------------------------------------
start kube-apiserver "$BIN_DIR/kube-apiserver" \
  --etcd-servers="$ETCD_CLIENT" --bind-address="$HOST_IP" --secure-port=6443 --advertise-address="$HOST_IP" \
  --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --profiling=false --v=1
wait_for "kube-apiserver /readyz" 120 kube-apiserver \
  curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$APISERVER/readyz"

start kube-controller-manager "$BIN_DIR/kube-controller-manager" \
  --kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" --profiling=false --v=1
start kube-scheduler "$BIN_DIR/kube-scheduler" \
  --kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
  --authentication-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --profiling=false --v=1

# --- nodes ------------------------------------------------------------------
# Each node's pods in a cgroup subtree of their own (kubelet's cgroupRoot).
for ((n = 1; n <= NODES; n++)); do
  for h in /sys/fs/cgroup/*/; do
    mountpoint -q "$h" || continue
    d=$h$(node_name $n)
    mkdir -p "$d"
    for f in cpuset.cpus cpuset.mems; do
      [ -f "$h$f" ] && [ -z "$(cat "$d/$f")" ] && cat "$h$f" >"$d/$f"
    done
  done
done
for ((n = 1; n <= NODES; n++)); do OBJFUSE_NO_WAIT=1 "$LOCAL_DIR/node.sh" start $n; done
# The pause image, in every node's containerd.
for ((n = 1; n <= NODES; n++)); do
  sock=$(node_containerd_sock $n)
  wait_for "$(node_name $n)'s containerd" 60 - ctr --address "$sock" version
  if ! ctr --address "$sock" images ls -q | grep -qx "docker.io/library/$PAUSE_IMAGE"; then
    CONTAINERD_ADDRESS=$sock "$REPO_ROOT/deploy/image/build.sh" pause >&2 || die "building the pause image failed"
  fi
done
wait_for "$NODES nodes Ready" 120 - nodes_ready
# Pods need their ServiceAccount (made by the controller manager).
wait_for "the default ServiceAccount" 60 kube-controller-manager kc get serviceaccount default

log "$NODES node(s) Ready after $(($(date +%s) - T0))s (logs: $LOG_DIR, stop: test/local/down.sh)"
echo "export KUBECONFIG=$KUBECONFIG_FILE"

#!/usr/bin/env bash
# Stops the cluster test/local/up.sh started and leaves the host as it was:
# pods first (so kubelet unmounts their volumes), then each node (with its
# mounts and network namespace) and every control-plane component by its
# recorded PID, then the cgroups, sysctls, routes, bridge and directories
# up.sh or the components made. Safe to run twice, or after a failed up.sh.
# Logs stay in _output/local/logs.
set -uo pipefail
source "$(dirname "$0")/env.sh"

[ "$(id -u)" = 0 ] || die "run as root"
T0=$(date +%s)

# stop NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 15).
stop() {
  local name=$1 secs=${2:-15} pid exe i
  if alive "$name"; then
    read -r pid exe <"$PIDS/$name.pid"
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < secs * 10; i++)); do
      [ -d /proc/$pid ] || break
      sleep 0.1
    done
    if [ -d /proc/$pid ]; then
      log "$name (pid $pid) ignored SIGTERM, killing"
      kill -KILL "$pid" 2>/dev/null
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$PIDS/$name.pid"
}

# poll SECONDS CMD...: true once CMD succeeds, false at the deadline.
poll() {
  local deadline=$(($(date +%s) + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

no_pods() { [ -z "$(kc get pods -A -o name 2>/dev/null)" ]; }

# --- workloads: let kubelet stop them and unmount their volumes ---------
NODES_STARTED=$(started_nodes)
any_node=
for n in $NODES_STARTED; do alive "$(node_name "$n")" && any_node=1; done
if alive kube-apiserver && [ -n "$any_node" ]; then
  # No new pods from controllers or the scheduler from now on.
  stop kube-controller-manager
  stop kube-scheduler
  if ! no_pods; then
    log "deleting all pods"
    kc delete pods -A --all --grace-period=10 --wait=false >/dev/null 2>&1
    if ! poll 60 no_pods; then
      log "pods still terminating after 60s; the nodes' own stop ends them"
      kc get pods -A -o wide >&2
    fi
  fi
fi
stop kube-controller-manager
stop kube-scheduler
# Each node: kubelet, containerd, then every process left on it; its
# mounts and network namespace go with it.
for n in $NODES_STARTED; do "$LOCAL_DIR/node.sh" stop "$n"; done
for n in $NODES_STARTED; do
  alive "$(node_name "$n")" && die "$(node_name "$n") is still running; not cleaning up under it"
done
stop kube-apiserver
stop etcd

# --- cgroups of the nodes' pods (kubelet's cgroupRoot) ----------------------
for cg in /sys/fs/cgroup/*/objfuse-node-* /sys/fs/cgroup/objfuse-node-*; do
  [ -d "$cg" ] || continue
  find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
  [ -d "$cg" ] && log "cgroup $cg still has processes"
done

if [ -d "$SAVED" ]; then
  # --- sysctls kubelet changed ---------------------------------------------
  while IFS='=' read -r k v; do
    [ -n "$k" ] && [ "$(sysctl -n "$k")" != "$v" ] && sysctl -q -w "$k=$v"
  done <"$SAVED/sysctls"

  # --- iptables chains added by kubelet or CNI plugins ---------------------
  for ipt in iptables ip6tables; do
    for t in filter nat mangle; do
      for ch in $($ipt -t $t -S 2>/dev/null | awk '$1 == "-N" { print $2 }'); do
        grep -qx "$ipt $t $ch" "$SAVED/chains" && continue
        case $ch in KUBE-* | CNI-*) ;; *) continue ;; esac
        # Rules elsewhere that jump to it, then the chain.
        $ipt -t $t -S | awk -v c="$ch" '$1 == "-A" && $2 != c && / -j / { for (i = 1; i <= NF; i++) if ($i == "-j" && $(i+1) == c) print }' |
          while read -r rule; do eval "$ipt -t $t ${rule/-A /-D }"; done
        $ipt -t $t -F "$ch" 2>/dev/null
        $ipt -t $t -X "$ch" 2>/dev/null || log "cannot delete $ipt -t $t chain $ch"
      done
    done
  done
fi

# --- network ----------------------------------------------------------------
ip route del blackhole "$SERVICE_CIDR" 2>/dev/null
for n in $NODES_STARTED; do ip link del "$(node_veth "$n")" 2>/dev/null; done
ip link del "$NODE_BRIDGE" 2>/dev/null

# --- directories ------------------------------------------------------------
# created_by_us PATH: PATH did not exist before up.sh (which saved the list).
created_by_us() { [ -f "$SAVED/paths" ] && ! grep -qx "$1" "$SAVED/paths"; }
left=$( { mounts_under "$CLUSTER_DIR"; mounts_under "$OBJFUSE_STATE_DIR"; } 2>/dev/null)
if [ -n "$left" ]; then
  log "not removing $CLUSTER_DIR: still mounted: $left"
  exit 1
fi
# The host's mount points for the nodes' paths: empty unless something
# else has put files there since, which stay.
for p in $FIXED_PATHS; do
  [ -e "$p" ] && created_by_us "$p" || continue
  rmdir "$p" 2>/dev/null || log "not removing $p: not empty"
done
rm -rf --one-file-system "$CLUSTER_DIR"
log "stopped and cleaned up in $(($(date +%s) - T0))s (logs kept in $LOG_DIR)"

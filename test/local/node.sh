#!/usr/bin/env bash
# One node of the local cluster, seen from the host.
#
#   node.sh start N            start node N (its own PID, mount, UTS and
#                              network namespaces; containerd and kubelet
#                              inside: test/local/node-init.sh)
#   node.sh stop N             stop it: kubelet, containerd, then every
#                              process left on it
#   node.sh kill N             lose it: SIGKILL to everything on it at once,
#                              as a power cut (its mounts go with it)
#   node.sh restart-kubelet N  restart its kubelet, as an upgrade would
#   node.sh exec N CMD...      run CMD on the node (all its namespaces)
#   node.sh pid N              the host PID of the node's PID 1
#
# N is a number (1, 2, ...) or a node name (objfuse-node-2).
set -euo pipefail
source "$(dirname "$0")/env.sh"

[ "$(id -u)" = 0 ] || die "run as root"
[ $# -ge 2 ] || die "usage: node.sh start|stop|kill|restart-kubelet|exec|pid N [CMD...]"
cmd=$1 N=${2##*-}
shift 2
[[ $N =~ ^[1-9]$ ]] || die "a node is a number 1-9 or its name objfuse-node-N, not '$N'"
started=$(cat "$CLUSTER_DIR/nodes/count" 2>/dev/null || echo 0)
((N <= started)) || [ "$cmd" = stop ] || die "the cluster has $started node(s) (test/local/up.sh N starts N), not node $N"
NAME=$(node_name "$N")

# init_pid: the host PID of the node's PID 1 (the child of the recorded
# unshare), empty when the node is not running.
init_pid() {
  alive "$NAME" || return 0
  local pid exe
  read -r pid exe <"$PIDS/$NAME.pid"
  cat "/proc/$pid/task/$pid/children" 2>/dev/null | awk '{ print $1 }'
}

# node_procs EXE: host PIDs of the node's processes running EXE.
node_procs() {
  local init ns d
  init=$(init_pid)
  [ -n "$init" ] || return 0
  ns=$(readlink "/proc/$init/ns/pid")
  for d in /proc/[0-9]*; do
    [ "$(readlink "$d/ns/pid" 2>/dev/null)" = "$ns" ] && [ "$(readlink "$d/exe" 2>/dev/null)" = "$1" ] && echo "${d#/proc/}"
  done
  return 0
}

ready() {
  [ "$(kc get node "$NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# poll DESC SECONDS CMD...
poll() {
  local desc=$1 deadline=$(($(date +%s) + $2)); shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$NAME: timed out waiting for $desc"
    sleep 0.2
  done
}

start() {
  if [ -n "$(init_pid)" ]; then
    log "$NAME already running"
    return
  fi
  mkdir -p "$(node_dir "$N")" "$LOG_DIR" "$PIDS"
  local unshare pid init
  unshare=$(command -v unshare)
  # --kill-child: the node dies with the recorded process (node.sh kill).
  setsid "$unshare" --kill-child --fork --pid --mount-proc --mount --propagation private --uts --net \
    bash "$LOCAL_DIR/node-init.sh" "$N" >>"$LOG_DIR/$NAME.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid $(readlink -f "$unshare")" >"$PIDS/$NAME.pid"
  has_init() { [ -n "$(init_pid)" ]; }
  poll "its PID 1" 10 has_init
  init=$(init_pid)
  # Its end of the nodes' bridge; node-init.sh waits for eth0.
  local veth
  veth=$(node_veth "$N")
  ip link del "$veth" 2>/dev/null || true
  ip link add "$veth" type veth peer name eth0 netns "$init"
  ip link set "$veth" master "$NODE_BRIDGE" up
  ip route replace "$(node_pod_cidr "$N")" via "$(node_ip "$N")"
  log "started $NAME (pid $init, ip $(node_ip "$N"))"
}

wait_ready() { poll "node Ready" 120 ready; }

stop() {
  local init i
  init=$(init_pid)
  if [ -n "$init" ]; then
    kill -TERM "$init"
    for ((i = 0; i < 300; i++)); do
      [ -d "/proc/$init" ] || break
      sleep 0.1
    done
    if [ -d "/proc/$init" ]; then log "$NAME ignored SIGTERM, killing it"; kill_node; fi
    log "stopped $NAME"
  fi
  rm -f "$PIDS/$NAME.pid"
}

kill_node() {
  local pid exe
  alive "$NAME" || die "$NAME is not running"
  read -r pid exe <"$PIDS/$NAME.pid"
  kill -KILL "$pid"
  poll "its processes to go" 30 test ! -d "/proc/$pid"
  rm -f "$PIDS/$NAME.pid"
  log "killed $NAME"
}

case $cmd in
start)
  start
  [ "${OBJFUSE_NO_WAIT:-}" ] || wait_ready
  ;;
stop) stop ;;
kill) kill_node ;;
restart-kubelet)
  kubelet=$(readlink -f "$BIN_DIR/kubelet")
  old=$(node_procs "$kubelet")
  [ -n "$old" ] || die "$NAME: kubelet is not running"
  since=$(date -u +%Y-%m-%dT%H:%M:%S)
  kill -TERM $old
  # node-init.sh starts it again; it is back once it renews its lease.
  new_kubelet() { local p; p=$(node_procs "$kubelet"); [ -n "$p" ] && [ "$p" != "$old" ]; }
  renewed() { [[ "$(kc -n kube-node-lease get lease "$NAME" -o 'jsonpath={.spec.renewTime}')" > "$since" ]]; }
  poll "a new kubelet" 30 new_kubelet
  poll "the new kubelet's lease" 60 renewed
  wait_ready
  log "restarted $NAME's kubelet ($old -> $(node_procs "$kubelet"))"
  ;;
exec)
  init=$(init_pid)
  [ -n "$init" ] || die "$NAME is not running"
  exec nsenter -t "$init" -a "$@"
  ;;
pid) init_pid ;;
*) die "unknown command $cmd" ;;
esac

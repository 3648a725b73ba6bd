#!/usr/bin/env bash
# Restarts the local cluster's kubelet with the same command line, as an
# upgrade or a crash would: for the e2e test that mounts survive it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
f=$PIDS/kubelet.pid
read -r pid exe <"$f"
alive kubelet || die "kubelet is not running"
mapfile -d '' argv </proc/"$pid"/cmdline
kill -TERM "$pid"
for _ in $(seq 1 100); do [ -d /proc/"$pid" ] || break; sleep 0.1; done
[ -d /proc/"$pid" ] && die "kubelet $pid did not stop"
setsid "${argv[@]}" >>"$LOG_DIR/kubelet.log" 2>&1 </dev/null &
echo "$! $exe" >"$f"
log "restarted kubelet (pid $pid -> $!)"
for _ in $(seq 1 300); do
  kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True && exit 0
  sleep 0.2
done
die "node $NODE_NAME not Ready after the kubelet restart"

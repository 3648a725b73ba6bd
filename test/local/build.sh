#!/usr/bin/env bash
# Builds what the local cluster and the suites on it run, and starts
# nothing:
#
#   test/local/build.sh kube   Kubernetes' binaries (up.sh runs this)
#   test/local/build.sh all    those, objfuse's images and the upstream
#                              suite's binaries and images, none imported
#
# `all` is what `make test` builds while the Go tests run (test/all.sh), so
# that the e2e run finds everything built: each step skips what is already
# built from the same inputs, so the e2e run's own builds are then quick.
# Cold, `all` is about half an hour of two cores: Kubernetes 10-12 min,
# the upstream suite's e2e.test about 15, the CSI sidecars a few.
set -euo pipefail
source "$(dirname "$0")/env.sh"

# kube: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
# and kubectl at KUBE_VERSION, from the wrapper module in test/local/kube,
# into BIN_DIR, unless they are there at that version.
kube() {
  local cmds="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl" c missing= pkgs= ld
  mkdir -p "$BIN_DIR"
  for c in $cmds; do [ -x "$BIN_DIR/$c" ] || missing=1; done
  if [ -z "$missing" ] && [ "$(cat "$BIN_DIR/.version" 2>/dev/null)" = "$KUBE_VERSION" ]; then
    return
  fi
  log "building Kubernetes $KUBE_VERSION (10-12 min with a cold Go cache, under a minute warm)"
  ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
  ld="$ld -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=33"
  ld="$ld -X k8s.io/component-base/version.gitTreeState=clean"
  for c in $cmds; do pkgs="$pkgs k8s.io/kubernetes/cmd/$c"; done
  # shellcheck disable=SC2086 # one word a package
  (cd "$LOCAL_DIR/kube" && CGO_ENABLED=0 go build -ldflags "$ld" -o "$BIN_DIR/" $pkgs) ||
    die "building Kubernetes failed"
  echo "$KUBE_VERSION" >"$BIN_DIR/.version"
}

case ${1:-} in
  kube) kube ;;
  all)
    kube
    "$REPO_ROOT/deploy/image/build.sh" --no-import all
    "$REPO_ROOT/test/conformance/run.sh" build
    "$REPO_ROOT/test/conformance/images.sh" --no-import
    ;;
  *) echo "usage: $0 kube|all" >&2; exit 2 ;;
esac

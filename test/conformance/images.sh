#!/usr/bin/env bash
# The images the upstream storage suite pulls, built here without Docker or
# a registry and side-loaded under their exact names: each a single-layer
# scratch image written as a docker-archive tar in $OUT/images/ (as
# deploy/image/build.sh builds objfuse's) and imported into containerd's
# k8s.io namespace: into every containerd named in CONTAINERD_ADDRESSES
# (space-separated), else every node's of the local cluster (test/local).
#
#   test/conformance/images.sh [--no-import]
#
# What the storage specs do in them decides what they hold (names and tags:
# test/utils/image/manifest.go of the Kubernetes release in go.mod):
#   busybox:1.36.1-1     the default test pod: sh, dd, sha256sum, base64 ...
#   nginx:1.14-4         "should allow exec of files": a shell only
#   jessie-dnsutils:1.7  multiVolume's pods: the same shell tools
#   agnhost:2.53         /agnhost (mounttest, pause) with busybox beside it:
#                        host-exec pods run nsenter and sh in it
# All from Debian's busybox-static, as objfuse-test; agnhost from this
# module, so from the same Kubernetes release as the suite.
set -euo pipefail
cd "$(dirname "$0")"
CONF=$PWD
REPO=$(cd ../.. && pwd)
OUT=${OBJFUSE_CONFORMANCE_OUT:-$REPO/_output/conformance}
REGISTRY=registry.k8s.io/e2e-test-images
ARCH=$(go env GOARCH)
IMPORT=1

log() { printf '%s conformance-images: %s\n' "$(date +%T)" "$*" >&2; }

# rootfs DIR: /etc/passwd and group, /tmp, a busybox applet link per
# command in /bin.
rootfs() {
  local r=$1 a
  rm -rf "$r" && mkdir -p "$r/etc" "$r/tmp" "$r/bin"
  chmod 1777 "$r/tmp"
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/sh' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$r/etc/group"
  [ -x /bin/busybox ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
  file -L /bin/busybox 2>/dev/null | grep -q dynamically && { log "/bin/busybox is not static (install busybox-static)"; exit 1; }
  cp /bin/busybox "$r/bin/busybox"
  for a in $("$r/bin/busybox" --list); do
    [ -e "$r/bin/$a" ] || ln -s busybox "$r/bin/$a"
  done
}

# json_list ARG...: a JSON array of strings (no quoting needed for ours).
json_list() { local IFS=,; local a=("${@/#/\"}"); a=("${a[@]/%/\"}"); echo "[${a[*]}]"; }

# image REF ROOTFS TAR ENTRYPOINT CMD...: writes TAR (docker-archive, one
# layer, root user as upstream's images); ENTRYPOINT may be "".
image() {
  local ref=$1 r=$2 tar=$3 entry=$4 w diff cfg; shift 4
  w=$(mktemp -d)
  # Reproducible layer: sorted, root-owned, fixed mtime.
  (cd "$r" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu -cf "$w/layer.tar" $(ls -A))
  diff=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
  mkdir "$w/$diff" && mv "$w/layer.tar" "$w/$diff/layer.tar"
  cat >"$w/config.json" <<EOF
{"architecture":"$ARCH","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Env":["PATH=/bin:/usr/bin:/sbin:/usr/sbin"],${entry:+\"Entrypoint\":$(json_list $entry),}"Cmd":$(json_list "$@"),"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$diff"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"test/conformance/images.sh"}]}
EOF
  cfg=$(sha256sum "$w/config.json" | cut -d' ' -f1)
  mv "$w/config.json" "$w/$cfg.json"
  echo "[{\"Config\":\"$cfg.json\",\"RepoTags\":[\"$ref\"],\"Layers\":[\"$diff/layer.tar\"]}]" >"$w/manifest.json"
  mkdir -p "$(dirname "$tar")"
  # Written aside and moved: a build stopped midway leaves no archive
  # that passes for a whole one.
  tar -C "$w" -cf "$tar.new" manifest.json "$cfg.json" "$diff/layer.tar"
  mv "$tar.new" "$tar"
  rm -rf "$w"
  log "$ref: $tar ($(du -h "$tar" | cut -f1))"
}

# fresh TAR FILE...: TAR exists and is newer than every FILE.
fresh() {
  local tar=$1 f; shift
  [ -f "$tar" ] || return 1
  for f in "$@"; do [ "$tar" -nt "$f" ] || return 1; done
}

# shell_image NAME TAG: busybox under the suite's name for NAME:TAG.
shell_image() {
  local tar=$OUT/images/$1.tar
  fresh "$tar" /bin/busybox "$CONF/images.sh" && { log "$1:$2 is up to date: $tar"; return; }
  rootfs "$OUT/rootfs/$1"
  image "$REGISTRY/$1:$2" "$OUT/rootfs/$1" "$tar" "" sh
}

agnhost_image() {
  local tar=$OUT/images/agnhost.tar r=$OUT/rootfs/agnhost
  # Static and stripped; a warm build cache makes this a relink. The binary
  # is replaced only when it changed, so that the archive stays fresh.
  mkdir -p "$OUT/bin"
  (cd "$CONF" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$OUT/bin/agnhost.new" k8s.io/kubernetes/test/images/agnhost)
  if cmp -s "$OUT/bin/agnhost.new" "$OUT/bin/agnhost"; then rm "$OUT/bin/agnhost.new"; else mv "$OUT/bin/agnhost.new" "$OUT/bin/agnhost"; fi
  fresh "$tar" "$OUT/bin/agnhost" /bin/busybox "$CONF/images.sh" && { log "agnhost:2.53 is up to date: $tar"; return; }
  rootfs "$r"
  cp "$OUT/bin/agnhost" "$r/agnhost"
  image "$REGISTRY/agnhost:2.53" "$r" "$tar" /agnhost pause
}

# import_all: every archive into every containerd.
import_all() {
  local a t
  for a in $CONTAINERD_ADDRESSES; do
    for t in "$OUT"/images/*.tar; do
      ctr --address "$a" -n k8s.io images import "$t" >/dev/null
    done
    log "imported $(ls "$OUT"/images/*.tar | wc -l) images into containerd $a"
  done
}

for a in "$@"; do
  case $a in
    --no-import) IMPORT= ;;
    *) echo "usage: $0 [--no-import]" >&2; exit 2 ;;
  esac
done
shell_image busybox 1.36.1-1
shell_image nginx 1.14-4
shell_image jessie-dnsutils 1.7
agnhost_image
[ -n "$IMPORT" ] || exit 0
CONTAINERD_ADDRESSES=${CONTAINERD_ADDRESSES:-$(ls "${OBJFUSE_CLUSTER_DIR:-/var/lib/objfuse-cluster}"/nodes/*/run/containerd/containerd.sock 2>/dev/null | tr '\n' ' ' || true)}
[ -n "$CONTAINERD_ADDRESSES" ] || { log "no containerd to import into (set CONTAINERD_ADDRESSES; with kind: kind load image-archive $OUT/images/*.tar)"; exit 1; }
import_all

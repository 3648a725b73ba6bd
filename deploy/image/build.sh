#!/usr/bin/env bash
# Builds objfuse's container images without Docker: static Go binaries (and
# Debian's busybox-static for a shell) in a single-layer scratch image,
# written as a docker-archive tar in _output/images/ and imported into
# containerd's k8s.io namespace with `ctr images import`: into every
# containerd named in CONTAINERD_ADDRESSES (space-separated), else the one
# at CONTAINERD_ADDRESS, else every node's of the local cluster (test/local).
#
#   deploy/image/build.sh [--no-import] [objfuse|sidecars|test|minio|pause|all]...
#
# objfuse is rebuilt every time; the pinned images (sidecars, test, minio,
# pause) only when their inputs changed (REBUILD=1 forces it).
# Images (no `latest` tags; they run as non-root unless the pod asks for root):
#   objfuse:TAG           /objfuse-csi, /objfuse-mount, /bin/sh (busybox)   user 65532
#   objfuse-sidecars:TAG  /csi-provisioner (v6.3.0), /csi-attacher (v4.12.0), /csi-resizer (v2.2.0),
#                         /csi-snapshotter and /snapshot-controller (v8.7.0)  user 65532
#   objfuse-test:TAG      busybox: sh, sha256sum, dd, ...                    user 0
#   objfuse-minio:TAG     /minio (from $(go env GOPATH)/bin/minio)           user 65532
#   objfuse-pause:TAG     /pause, the local cluster's pod sandbox            user 65535
# With a Docker engine, the root Dockerfile builds objfuse:TAG instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
TAG=${TAG:-v0.1.0-dev}
OUT=${OUT:-$REPO/_output/images}
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo "$TAG")}
ARCH=$(go env GOARCH)
export CGO_ENABLED=0
IMPORT=1

log() { printf '%s images: %s\n' "$(date +%T)" "$*" >&2; }

# gobuild DIR OUTDIR PKG... [-- LDFLAGS]: static, trimmed binaries.
gobuild() {
  local dir=$1 out=$2; shift 2
  (cd "$dir" && go build -trimpath -ldflags "-s -w ${LDX:-}" -o "$out/" "$@")
}

# rootfs DIR [USER]: the common skeleton: /etc/passwd and group, /tmp,
# CA certificates.
rootfs() {
  local r=$1
  rm -rf "$r" && mkdir -p "$r/etc" "$r/tmp" "$r/bin"
  chmod 1777 "$r/tmp"
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nonroot:x:65532:65532:nonroot:/home/nonroot:/bin/sh' \
    'nobody:x:65534:65534:nobody:/nonexistent:/bin/sh' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' 'nogroup:x:65534:' >"$r/etc/group"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    mkdir -p "$r/etc/ssl/certs" && cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  fi
}

# busybox DIR: Debian's static busybox with a link per applet in /bin.
busybox() {
  [ -x /bin/busybox ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
  file -L /bin/busybox 2>/dev/null | grep -q dynamically && { log "/bin/busybox is not static (install busybox-static)"; exit 1; }
  cp /bin/busybox "$1/bin/busybox"
  local a
  for a in $("$1/bin/busybox" --list); do
    [ -e "$1/bin/$a" ] || ln -s busybox "$1/bin/$a"
  done
}

# json_list ARG...: a JSON array of strings (no quoting needed for ours).
json_list() { local IFS=,; local a=("${@/#/\"}"); a=("${a[@]/%/\"}"); echo "[${a[*]}]"; }

# image NAME ROOTFS USER CMD...: writes $OUT/NAME.tar (docker-archive, one
# layer) and imports it.
image() {
  local name=$1 r=$2 user=$3; shift 3
  local ref=$name:$TAG w
  w=$(mktemp -d)
  # Reproducible layer: sorted, root-owned, fixed mtime.
  (cd "$r" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu -cf "$w/layer.tar" $(ls -A))
  local diff cfg
  diff=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
  mkdir "$w/$diff" && mv "$w/layer.tar" "$w/$diff/layer.tar"
  cat >"$w/config.json" <<EOF
{"architecture":"$ARCH","os":"linux","created":"1970-01-01T00:00:00Z","config":{"User":"$user","Env":["PATH=/bin:/usr/bin:/sbin:/usr/sbin"${IMAGE_ENV:+,\"$IMAGE_ENV\"}],"Cmd":$(json_list "$@"),"WorkingDir":"/","Labels":{"org.opencontainers.image.source":"https://github.com/objfuse/objfuse","org.opencontainers.image.version":"$VERSION"}},"rootfs":{"type":"layers","diff_ids":["sha256:$diff"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"deploy/image/build.sh"}]}
EOF
  cfg=$(sha256sum "$w/config.json" | cut -d' ' -f1)
  mv "$w/config.json" "$w/$cfg.json"
  echo "[{\"Config\":\"$cfg.json\",\"RepoTags\":[\"$ref\"],\"Layers\":[\"$diff/layer.tar\"]}]" >"$w/manifest.json"
  mkdir -p "$OUT"
  # Written aside and moved: a build stopped midway (test/all.sh stops
  # its background one) leaves no archive that passes for a whole one.
  tar -C "$w" -cf "$OUT/$name.tar.new" manifest.json "$cfg.json" "$diff/layer.tar"
  mv "$OUT/$name.tar.new" "$OUT/$name.tar"
  rm -rf "$w"
  log "$ref: $OUT/$name.tar ($(du -h "$OUT/$name.tar" | cut -f1))"
  [ -z "$IMPORT" ] || import_archive "$OUT/$name.tar"
}

# import_archive TAR: imports an image archive into every containerd.
import_archive() {
  local a
  for a in $CONTAINERD_ADDRESSES; do
    ctr --address "$a" -n k8s.io images import "$1" >/dev/null
    log "$(basename "$1" .tar):$TAG imported into containerd $a"
  done
}

# fresh NAME FILE...: $OUT/NAME.tar exists and is newer than every FILE
# (pinned images need no rebuild: import the archive again).
fresh() {
  local tar=$OUT/$1.tar f; shift
  [ -f "$tar" ] && [ -z "${REBUILD:-}" ] || return 1
  for f in "$@"; do [ "$tar" -nt "$f" ] || return 1; done
}

# import_only NAME: imports an up-to-date archive.
import_only() {
  log "$1:$TAG is up to date: $OUT/$1.tar"
  [ -z "$IMPORT" ] || import_archive "$OUT/$1.tar"
}

build_objfuse() {
  local r=$OUT/rootfs/objfuse
  rootfs "$r"
  local cmds=(./cmd/objfuse-mount)
  [ -d cmd/objfuse-csi ] && cmds+=(./cmd/objfuse-csi) || log "cmd/objfuse-csi does not exist yet: image holds objfuse-mount only"
  LDX="-X main.version=$VERSION" gobuild "$REPO" "$r" "${cmds[@]}"
  busybox "$r"
  if [ -x "$r/objfuse-csi" ]; then image objfuse "$r" 65532:65532 /objfuse-csi; else image objfuse "$r" 65532:65532 /objfuse-mount; fi
}

build_sidecars() {
  local r=$OUT/rootfs/sidecars
  if fresh objfuse-sidecars deploy/image/sidecars/go.mod deploy/image/snapshotter/go.mod "$0"; then import_only objfuse-sidecars; return; fi
  rootfs "$r"
  LDX="-X main.version=v6.3.0" gobuild deploy/image/sidecars "$r" github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
  LDX="-X main.version=v4.12.0" gobuild deploy/image/sidecars "$r" github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher
  LDX="-X main.version=v2.2.0" gobuild deploy/image/sidecars "$r" github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer
  LDX="-X main.version=v8.7.0" gobuild deploy/image/snapshotter "$r" github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter \
    github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
  rmdir "$r/bin"
  image objfuse-sidecars "$r" 65532:65532 /csi-provisioner
}

build_test() {
  local r=$OUT/rootfs/test
  if fresh objfuse-test /bin/busybox "$0"; then import_only objfuse-test; return; fi
  rootfs "$r"
  busybox "$r"
  image objfuse-test "$r" 0:0 /bin/sh
}

build_pause() {
  local r=$OUT/rootfs/pause
  if fresh objfuse-pause deploy/image/pause/main.go "$0"; then import_only objfuse-pause; return; fi
  rootfs "$r"
  gobuild "$REPO" "$r" ./deploy/image/pause
  rmdir "$r/bin"
  image objfuse-pause "$r" 65535:65535 /pause
}

# MinIO: the binary the test suites use. A cgo build is dynamically linked:
# its libraries come along.
build_minio() {
  local bin r=$OUT/rootfs/minio
  bin=$(command -v minio || echo "$(go env GOPATH)/bin/minio")
  if [ ! -x "$bin" ]; then
    log "building MinIO $MINIO_VERSION (about 8 minutes cold)"
    go install "github.com/minio/minio@$MINIO_VERSION"
  fi
  if fresh objfuse-minio "$bin" "$0"; then import_only objfuse-minio; return; fi
  rootfs "$r"
  cp "$bin" "$r/minio"
  local lib
  for lib in $(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*'); do
    mkdir -p "$r$(dirname "$lib")" && cp -L "$lib" "$r$lib"
  done
  rmdir "$r/bin"
  # MinIO keeps its certs dir under $HOME.
  IMAGE_ENV=HOME=/tmp image objfuse-minio "$r" 65532:65532 /minio server /data
}

targets=()
for a in "$@"; do
  case $a in
    --no-import) IMPORT= ;;
    all) targets+=(pause objfuse sidecars test minio) ;;
    pause | objfuse | sidecars | test | minio) targets+=("$a") ;;
    *) echo "usage: $0 [--no-import] [objfuse|sidecars|test|minio|pause|all]..." >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=(pause objfuse sidecars test minio)
# The local cluster's nodes (test/local) unless told otherwise; with none,
# the archives only.
if [ -z "${CONTAINERD_ADDRESSES:-}" ]; then
  # (ls fails when there are none: the archives only, not an exit.)
  CONTAINERD_ADDRESSES=${CONTAINERD_ADDRESS:-$(ls "${OBJFUSE_CLUSTER_DIR:-/var/lib/objfuse-cluster}"/nodes/*/run/containerd/containerd.sock 2>/dev/null | tr '\n' ' ' || true)}
fi
if [ -n "$IMPORT" ] && [ -z "$CONTAINERD_ADDRESSES" ]; then
  log "no containerd to import into: writing archives only (start test/local/up.sh to import)"
  IMPORT=
fi
if [ -n "$IMPORT" ]; then
  for a in $CONTAINERD_ADDRESSES; do
    ctr --address "$a" version >/dev/null 2>&1 || { log "ERROR: containerd does not answer at $a"; exit 1; }
  done
fi
for t in "${targets[@]}"; do "build_$t"; done

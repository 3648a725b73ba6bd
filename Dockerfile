# syntax=docker/dockerfile:1
# objfuse:<version> for machines with Docker: objfuse-csi and objfuse-mount,
# static, on distroless (non-root by default; the node plugin's pod spec
# asks for root), with busybox for a shell. Without Docker,
# deploy/image/build.sh builds the same image (`make images`).
#
#   docker build -t objfuse:v0.1.0-dev --build-arg VERSION=v0.1.0-dev .
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces go-fuse with this fork; its go.mod is needed to resolve.
COPY third_party/go-fuse/go.mod third_party/go-fuse/go.sum ./third_party/go-fuse/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=v0.1.0-dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/ ./cmd/objfuse-csi ./cmd/objfuse-mount

# Static busybox (the musl build) for a shell in the final image.
FROM busybox:1.37.0-musl AS busybox

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=busybox /bin/busybox /bin/busybox
USER 0:0
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY --from=build /out/objfuse-csi /out/objfuse-mount /
USER 65532:65532
CMD ["/objfuse-csi"]

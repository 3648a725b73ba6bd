# objfuse: developer entry points. `make demo` runs the driver for real;
# `make test` is what CI runs.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
export CGO_ENABLED ?= 0

.PHONY: build test e2e conformance unit fuzz stress demo demo-down images bench lint

build:
	go build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

# Everything CI runs: the Go tests, the fuzz targets briefly, then the
# e2e suite and the upstream storage suite on a real cluster of 3 nodes,
# whose builds run beside the Go tests at the lowest priority (test/all.sh).
test:
	test/all.sh

# Unit and behaviour suites on memory and a real MinIO (each test starts its
# own), the CLI, csi-sanity and node tests, with the race detector. Needs
# root and /dev/fuse. Then the POSIX suite again through fusefs/takeover
# on a mount made as the node plugin makes it (what a mounter pod serves).
# Then the POSIX, version and sharing suites on mounts with the kernel's
# writeback cache (writebackCache), where a few say how it differs.
# Then the memory budget's test, which -race would skew (it skips there).
# Then the takeover tests of our go-fuse fork, its own module, which ./...
# does not reach (third_party/go-fuse/README.objfuse.md).
unit:
	CGO_ENABLED=1 go test -race -count=1 -timeout 40m ./...
	OBJFUSE_TEST_TAKEOVER=1 CGO_ENABLED=1 go test -race -count=1 -timeout 10m -run 'TestPOSIX' ./fusefs/
	OBJFUSE_TEST_WRITEBACK=1 CGO_ENABLED=1 go test -race -count=1 -timeout 10m -run 'TestPOSIX|TestCloseToOpen|TestConcurrentExercisers|Version|Replaced|Append|Conflict|TestChmodKeeps|TestWriteInPlace' ./fusefs/
	go test -count=1 -timeout 5m -run 'TestTheMemoryBudgetHolds' ./fusefs/
	cd third_party/go-fuse && CGO_ENABLED=1 go test -race -count=1 -timeout 2m -run 'Resume|Resend|Epoch|Prefault|RequestBuffers' ./fuse/

# Every fuzz target for FUZZTIME (default 50000x, inputs) each (test/fuzz.sh).
fuzz:
	test/fuzz.sh

# The Go suites, 5 times over under -race while busy loops keep every
# core occupied: what depends on timing fails here before it fails CI.
# STRESS_COUNT, STRESS_PKGS, STRESS_RUN and STRESS_LOAD narrow it (see
# test/stress.sh).
stress:
	test/stress.sh

# The e2e suite, then the upstream storage suite (conformance), on a real
# Kubernetes of 3 nodes here (test/local): cluster, images, MinIO and
# objfuse up, the suites, everything down. Needs root. Kubernetes, the CSI
# sidecars and the upstream suite are built from source the first time
# (about 25 minutes on two cores, under five minutes warm).
e2e:
	test/local/e2e.sh

# The upstream Kubernetes storage suite (k8s.io/kubernetes
# test/e2e/storage/external) against objfuse on the cluster of $KUBECONFIG
# (default: the local cluster), as test/conformance/driver.yaml claims.
conformance:
	test/conformance/run.sh

lint:
	test -z "$$(gofmt -l .)"
	go vet ./...

# objfuse against s3fs, rclone mount and raw minio-go on one MinIO (needs
# root, /dev/fuse, `apt-get install s3fs rclone`); quick run:
# make bench BENCH_FLAGS="-size 256MiB -rounds 1". See test/bench/main.go.
bench:
	go run ./test/bench $(BENCH_FLAGS)

# The images (objfuse, sidecars, test, MinIO, pause) built without Docker
# and imported into the local cluster's containerd when it runs
# (deploy/image/build.sh; with Docker, `docker build .` builds objfuse).
images:
	deploy/image/build.sh all

# A real cluster (kind if Docker answers, else test/local's one-node
# Kubernetes), MinIO, objfuse and a pod writing through a PVC. Needs root.
demo:
	test/local/demo.sh

demo-down:
	test/local/demo.sh down

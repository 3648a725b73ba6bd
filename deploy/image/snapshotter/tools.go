//go:build tools

// Package snapshotter only pins the commands deploy/image/build.sh builds.
package snapshotter

import (
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)

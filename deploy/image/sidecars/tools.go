//go:build tools

// Package sidecars only pins the commands deploy/image/build.sh builds.
package sidecars

import (
	_ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
	_ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
	_ "github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer"
)

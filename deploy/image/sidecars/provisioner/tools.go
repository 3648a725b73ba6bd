//go:build tools

// Package provisioner only pins the command deploy/image/build.sh builds.
package provisioner

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"

//go:build tools

// Package attacher only pins the command deploy/image/build.sh builds.
package attacher

import _ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"

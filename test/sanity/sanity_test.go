// Package sanity runs the CSI conformance suite (csi-sanity) against the
// real driver: controller and node in one process, a real MinIO, real
// FUSE mounts served by objfuse-mount processes running as nobody.
package sanity

import (
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/objfuse/objfuse/test/csitest"
)

func TestSanity(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	cfg := sanity.NewTestConfig()
	cfg.Address = env.Endpoint
	cfg.TargetPath = env.Dir + "/target"
	cfg.StagingPath = env.Dir + "/staging"
	cfg.SecretsFile = env.SecretsFile
	cfg.TestVolumeParameters = map[string]string{}
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
}

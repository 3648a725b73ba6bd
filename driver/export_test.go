package driver

import (
	"context"

	"github.com/objfuse/objfuse/mounter-pod/launcher"
)

// SyncCredentials runs one pass of the controller's credentials sync.
func SyncCredentials(ctx context.Context, d *Driver) (int, error) {
	return d.syncCredentials(ctx, d.opts.Launcher.(*launcher.Kube))
}

// RelaunchMissing runs one pass of the controller's mounter check.
func RelaunchMissing(ctx context.Context, d *Driver) (int, error) {
	return d.relaunchMissing(ctx, d.opts.Launcher.(*launcher.Kube))
}
